"""`webmp bench`: cli (the command and run_bench), one module per section (matmul, step, memory,
readbacks, profile), report (targets, summary, table), cold (--cold-start), ranks (--ranks N),
machine (what a run ran on), and markdown with sections (docs/benchmarks.md from the JSON)."""
