"""`webmp train | model | export | sample | serve | bench` — the command line.

`webmp train`'s configuration flags are generated from TrainConfig (webmp/config.py): one flag per
field, named after it (underscores as dashes), typed by its annotation (int, float, str, bool,
list[...] as comma-separated values, Literal[...] as choices, `T | None` as T), defaulting to its
default and helped by its docstring. A new field is a new flag with nothing to add here. `serve` and
`bench` parse their own arguments (webmp/serve/cli.py, webmp/bench/cli.py); `sample`'s are below
(the work is webmp/sample/replay.py's, imported when the command runs: it loads wgpu), and so are
`export`'s (the work: webmp/train/export.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from collections.abc import Callable
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from . import __version__
from .config import MODEL_DEFAULTS, TrainConfig, config_error_message, find_meta
from .nn import Network

COMMANDS = {
    "train": "train a model natively through wgpu-py",
    "model": "print a network's layer table: output shapes, parameters, activation memory",
    "sample": "generate text with a trained GPT or token-network run (on the GPU)",
    "serve": "serve the browser runtime (FastAPI) on 127.0.0.1",
    "bench": "benchmark kernels, step overhead and memory",
    "export": "write a run's trained weights as safetensors (webmp's or PyTorch's layout)",
}
# set (to anything but 0): `webmp train` does no first-use tuning, as with --no-tune (the test suite sets it)
NO_TUNE_ENV = "WEBMP_NO_TUNE"
SCALARS: dict[type, str] = {int: "INT", float: "FLOAT", str: "TEXT"}  # flag types and their metavars


def flag_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def format_default(value: object) -> str:
    """A default as it is typed on the command line: lists comma-separated."""
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def _list_type(elem: type, example: str) -> Callable[[str], list[Any]]:
    def parse(text: str) -> list[Any]:
        parts = (text.replace("x", ",") if elem is int else text).split(",")  # 256x256 as before
        try:
            return [elem(p.strip()) for p in parts if p.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"takes comma-separated {elem.__name__} values such as {example}, got {text!r}"
            ) from None

    parse.__name__ = f"list[{elem.__name__}]"
    return parse


def _optional(ann: Any) -> Any:
    """T of `T | None` (either spelling), else None."""
    args = get_args(ann)
    if get_origin(ann) in (Union, UnionType) and len(args) == 2 and type(None) in args:
        return next(a for a in args if a is not type(None))
    return None


def _network_file(path: str) -> Network:
    """A --model-spec file, read and checked whole (webmp.nn.Network.from_file)."""
    try:
        return Network.from_file(path)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


_network_file.__name__ = "network file"


def _choice_of(kind: type, choices: tuple) -> Any:
    """argparse's type for numeric choices: a value that is not even a number is an invalid choice
    too (argparse would call it an invalid int), naming the choices."""

    def convert(text: str) -> Any:
        try:
            return kind(text)
        except ValueError:
            listed = ", ".join(map(repr, choices))
            raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from {listed})") from None

    return convert


def _flag_spec(name: str, field: FieldInfo, default: object) -> dict[str, Any]:
    """add_argument keywords for one config field, from its annotation."""
    ann = field.annotation
    if get_origin(ann) is Literal:
        choices = get_args(ann)
        kinds = {type(c) for c in choices}
        if len(kinds) == 1 and kinds <= set(SCALARS):
            kind = kinds.pop()
            return {"type": kind if kind is str else _choice_of(kind, choices), "choices": choices}
    elif ann is bool:
        return {"action": argparse.BooleanOptionalAction}
    elif isinstance(ann, type) and ann in SCALARS:
        return {"type": ann, "metavar": SCALARS[ann]}
    elif isinstance(_optional(ann), type) and issubclass(_optional(ann), Network):
        return {"type": _network_file, "metavar": "FILE.json"}
    elif _optional(ann) in SCALARS:  # `str | None = None`: the flag sets it, leaving it out keeps None
        scalar = _optional(ann)
        return {"type": scalar, "metavar": SCALARS[scalar]}
    elif get_origin(ann) is list and len(get_args(ann)) == 1 and get_args(ann)[0] in SCALARS:
        elem = get_args(ann)[0]
        metavar = SCALARS[elem]
        return {"type": _list_type(elem, format_default(default) or "1,2"), "metavar": f"{metavar},{metavar}"}
    raise TypeError(f"{name}: webmp/cli.py has no flag type for {ann!r}")


def add_train_flags(p: argparse.ArgumentParser, model: type[BaseModel] = TrainConfig) -> None:
    """One flag per field of `model` (TrainConfig), with the field's default and docstring as help and
    its Meta.metavar, where it has one, instead of its type's."""
    group = p.add_argument_group("configuration", f"the fields of {model.__module__}.{model.__qualname__}")
    for name, field in model.model_fields.items():
        default = field.get_default(call_default_factory=True)
        meta = find_meta(field)
        action = group.add_argument(
            flag_name(name),
            dest=name,
            default=argparse.SUPPRESS,  # a flag left out stays out: the model's default applies
            **{
                **_flag_spec(f"{model.__qualname__}.{name}", field, default),
                **({"metavar": meta.metavar} if meta is not None and meta.metavar else {}),
            },
        )
        # set after add_argument, so that no action (BooleanOptionalAction) adds a default of its own
        text = " ".join((field.description or "").split())
        by_model = "".join(
            f"; {m}: {format_default(d[name])}" for m, d in MODEL_DEFAULTS.items() if name in d
        )
        action.help = f"{text} (default: {format_default(default)}{by_model})".strip().replace("%", "%%")


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The TrainConfig of parsed `add_train_flags` flags; raises pydantic's ValidationError."""
    return TrainConfig(**{k: getattr(args, k) for k in TrainConfig.model_fields if hasattr(args, k)})


def train_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="webmp train",
        description="Train an MLP or a character-level GPT in mixed precision on WebGPU",
        usage="webmp train [-h] [--out DIR] [--resume RUN] [--quiet] [--FIELD VALUE ...]",
    )
    run = p.add_argument_group("run")
    run.add_argument("--out", metavar="DIR", help="run directory (default: runs/run-<time>)")
    run.add_argument(
        "--resume",
        metavar="RUN",
        help="run directory or checkpoint to continue from, with its own config: only the flags given "
        "change it (the model, data, precision, batch size and seed cannot)",
    )
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    # not TrainConfig fields: tiles change how fast a run is, never what it computes (every choice
    # gives the same bits), so they are no setting of the run's (config.json, resume, the page's form)
    run.add_argument(
        "--no-tune",
        action="store_true",
        help="no first-use tuning: the shape classes the tune cache lacks for this adapter keep the "
        f"shipped tiles of its class (or the defaults) instead of being timed before the plan is built "
        f"(also ${NO_TUNE_ENV}=1)",
    )
    run.add_argument(
        "--tune-budget",
        type=float,
        metavar="S",
        default=None,
        help="seconds the first-use tuning may take (default: webmp.tune.first_use.FIRST_USE_BUDGET_S, 3); "
        "given, it tunes even an adapter whose class's shipped table was measured (lavapipe, "
        "SwiftShader), which is otherwise not tuned",
    )
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="check the configuration and the data, print what the GPU would hold (a network's layer "
        "table) and stop before any GPU work",
    )
    add_train_flags(p)
    return p


def cmd_train(argv: list[str]) -> int:
    args = train_parser().parse_args(argv)
    given = {k: getattr(args, k) for k in TrainConfig.model_fields if hasattr(args, k)}
    resume = None
    try:
        if args.resume is None:
            cfg = config_from_args(args)
        else:  # the run's own config, with only the flags given changed (the checkpoint read once)
            from .train.loop import Resume

            resume = Resume.read(args.resume)
            cfg = resume.config(given)
    except ValidationError as e:
        print(f"webmp train: {config_error_message(e)}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as e:
        print(f"webmp train: {e}", file=sys.stderr)
        return 1
    if args.dry_run:
        from .train.dry_run import dry_run_report

        try:
            print(dry_run_report(cfg))
        except (OSError, ValueError) as e:
            print(f"webmp train: {e}", file=sys.stderr)
            return 1
        return 0
    from .train.distributed import detect_world
    from .train.loop import ScaleCollapseError, Trainer
    from .tune.first_use import FIRST_USE_BUDGET_S, FirstUseTuning

    budget = FIRST_USE_BUDGET_S if args.tune_budget is None else args.tune_budget
    if budget < 0:
        print(f"webmp train: --tune-budget {budget:g}: give seconds >= 0", file=sys.stderr)
        return 2
    off = args.no_tune or budget == 0 or os.environ.get(NO_TUNE_ENV, "") not in ("", "0")
    # an explicit budget tunes even where the adapter class's shipped table was measured
    tuner = None if off else FirstUseTuning(budget, even_measured=args.tune_budget is not None)

    try:
        world = detect_world()
    except RuntimeError as e:
        print(f"webmp train: {e}", file=sys.stderr)
        return 1
    where = f" (rank {world.rank} of {world.size})" if world.size > 1 else ""
    try:
        Trainer(cfg, out=args.out, resume=resume, progress=not args.quiet, world=world, tuner=tuner).run()
    except ScaleCollapseError as e:
        print(f"webmp train{where}: {e}", file=sys.stderr)
        world.abort(3)  # under MPI: ends every rank now (the others may wait in an all-reduce)
        return 3
    except (RuntimeError, ValueError, OSError) as e:
        print(f"webmp train{where}: {e}", file=sys.stderr)
        world.abort(1)
        return 1
    return 0


def model_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="webmp model",
        description="Print the layer table of a network file (webmp train --model-spec FILE.json): each "
        "layer's output shape, parameters and the activation bytes its training step keeps in mixed "
        "precision and in fp32, from the plan's own buffers. No GPU work.",
    )
    p.add_argument("spec", metavar="FILE.json", type=_network_file, help="the network file")
    p.add_argument(
        "--batch-size",
        type=int,
        default=TrainConfig.model_fields["batch_size"].default,
        metavar="INT",
        help="the batch the activations are sized for (default: %(default)s, train's)",
    )
    p.add_argument("--data", metavar="FILE", help="a data file (.npz or .csv) the network must fit")
    p.add_argument("--json", action="store_true", help="the table as JSON")
    return p


def cmd_model(argv: list[str]) -> int:
    args = model_parser().parse_args(argv)
    from .train.dry_run import network_table

    if not 1 <= args.batch_size <= 1 << 20:
        print(f"webmp model: --batch-size {args.batch_size} must be between 1 and {1 << 20}", file=sys.stderr)
        return 2
    try:
        table = network_table(args.spec, args.batch_size, args.data)
    except (OSError, ValueError) as e:
        print(f"webmp model: {e}", file=sys.stderr)
        return 1
    print(json.dumps(table.to_dict(), indent=1) if args.json else table.format())
    return 0


def _setting(name: str) -> Callable[[str], Any]:
    """The argparse type of one sampling setting, checked by webmp.sample.job.SampleSettings: its
    problem (argparse adds "argument --NAME: ") for a bad value, before the run directory is read."""
    from .sample.job import SampleSettings, SettingError  # no wgpu there

    def parse(text: str) -> Any:
        try:
            return getattr(SampleSettings.of(**{name: text}), name)
        except SettingError as e:
            raise argparse.ArgumentTypeError(e.problem) from None

    return parse


def sample_parser() -> argparse.ArgumentParser:
    from .sample.job import SampleSettings  # no wgpu there

    p = argparse.ArgumentParser(
        prog="webmp sample",
        description="Generate text with the model of a run directory (webmp train --model gpt, or "
        "--model-spec a network with a token input), on the GPU with the training kernels. Prints the "
        "prompt, the generated characters and a newline. While prompt and text fit in the model's "
        "context each character is computed for its own position over attention caches (several "
        "times faster, the same text); past the context every character recomputes the window.",
    )
    p.add_argument("run", metavar="RUN_DIR", help="the run directory (its checkpoint and vocabulary)")
    p.add_argument(
        "--prompt",
        default="",
        help="text to continue; its characters must be in the run's vocabulary (default: empty, the "
        "model starts after a newline)",
    )
    for name, metavar in (("tokens", "N"), ("temperature", "T"), ("seed", None)):
        field = SampleSettings.model_fields[name]
        p.add_argument(
            flag_name(name),
            type=_setting(name),
            default=field.default,
            metavar=metavar,
            help=f"{field.description} (default: {field.default})",
        )
    p.add_argument(
        "--f16",
        choices=("native", "emulated", "auto"),
        default=None,
        help="f16 path instead of the run's (a mixed-precision run; native and emulated give the same text)",
    )
    return p


def cmd_sample(argv: list[str]) -> int:
    args = sample_parser().parse_args(argv)
    from .sample.job import SampleError
    from .sample.replay import sample

    try:
        text = sample(
            args.run,
            args.prompt,
            tokens=args.tokens,
            temperature=args.temperature,
            seed=args.seed,
            f16=args.f16,
        )
    except (SampleError, RuntimeError) as e:
        print(f"webmp sample: {e}", file=sys.stderr)
        return 1
    try:
        sys.stdout.write(text + "\n")
    except UnicodeEncodeError:  # a terminal encoding without some generated character: escape it
        sys.stdout.flush()
        enc = sys.stdout.encoding or "utf-8"
        sys.stdout.buffer.write((text + "\n").encode(enc, errors="backslashreplace"))
    sys.stdout.flush()
    return 0


def export_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="webmp export",
        description="Write the trained weights of a run directory (the f32 masters of its checkpoint) "
        "as a safetensors file: in webmp's names and layouts (what --init-weights reads), or as the "
        "state_dict of its equivalent PyTorch nn.Sequential (a network of webmp.nn layers; the mlp, "
        "mlp-ln and gpt as the networks they are; README: A network of your own).",
    )
    p.add_argument("run", metavar="RUN_DIR", help="the run directory (its checkpoint)")
    p.add_argument("out", metavar="OUT.safetensors", help="the file to write (replaced if there)")
    p.add_argument(
        "--layout",
        choices=("torch", "webmp"),
        default="webmp",
        help="torch: PyTorch's names and layouts; webmp: webmp's (default: webmp)",
    )
    return p


def cmd_export(argv: list[str]) -> int:
    args = export_parser().parse_args(argv)
    from .train.export import export_weights

    try:
        done = export_weights(args.run, args.out, args.layout)
    except (OSError, ValueError) as e:
        print(f"webmp export: {' '.join(str(e).split())}", file=sys.stderr)
        return 1
    print(f"webmp export: {done.path}: {done.tensors} tensors at step {done.step}, {done.layout} layout")
    return 0


def main_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="webmp",
        description="webmp: a WebGPU mixed-precision training engine",
        epilog="`webmp <command> --help` lists a command's options.",
    )
    p.add_argument("-V", "--version", action="version", version=f"webmp {__version__}")
    sub = p.add_subparsers(title="commands", dest="command", metavar="{" + ",".join(COMMANDS) + "}")
    for name, text in COMMANDS.items():
        sub.add_parser(name, help=text, add_help=False)  # each command parses its own arguments
    return p


def _dispatch(argv: list[str]) -> int:
    if argv and argv[0] in COMMANDS:
        cmd, rest = argv[0], argv[1:]
        if cmd == "train":
            return cmd_train(rest)
        if cmd == "sample":
            return cmd_sample(rest)
        if cmd == "model":
            return cmd_model(rest)
        if cmd == "export":
            return cmd_export(rest)
        if cmd == "serve":
            from .serve.cli import cli_serve

            return cli_serve(rest)
        from .bench.cli import cli_bench

        return cli_bench(rest)
    p = main_parser()
    p.parse_args(argv)  # --help, --version and an unknown command exit here
    p.print_help(sys.stderr)  # no command
    return 2


def _format_warning(message, category, filename, lineno, line=None) -> str:
    """webmp's own warnings (their text starts "webmp") as their line alone, others as Python shows them."""
    text = str(message)
    if text.startswith("webmp"):
        return text + "\n"
    return _PYTHON_FORMAT_WARNING(message, category, filename, lineno, line)


_PYTHON_FORMAT_WARNING = warnings.formatwarning


def main(argv: list[str] | None = None) -> int:
    """Runs `webmp ARGV`; returns its exit status, argparse's included (0 after --help, 2 on bad flags)."""
    warnings.formatwarning = _format_warning
    try:
        return _dispatch(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        print(e.code, file=sys.stderr)
        return 1
    finally:
        warnings.formatwarning = _PYTHON_FORMAT_WARNING


if __name__ == "__main__":
    sys.exit(main())
