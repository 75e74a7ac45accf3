"""The browser runtime's server: FastAPI app, browser runs, native runs read-only, the wire format, the
Python client.
"""
