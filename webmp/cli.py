"""`webmp train | serve | bench` — the command line."""
from __future__ import annotations

import argparse
import sys

from pydantic import ValidationError

from .config import TrainConfig, config_error_message


def _widths(text: str) -> list[int]:
    try:
        return [int(x) for x in text.replace("x", ",").split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--hidden takes comma-separated widths such as 256,256, got {text!r}")


def add_train_flags(p: argparse.ArgumentParser) -> None:
    d = TrainConfig()
    p.add_argument("--model", choices=["mlp", "mlp-ln"], default=d.model,
                   help="MLP of Linear layers; mlp-ln adds LayerNorm after each hidden Linear")
    p.add_argument("--hidden", type=_widths, default=d.hidden, help="hidden widths, e.g. 256,256")
    p.add_argument("--act", choices=["gelu", "relu"], default=d.act)
    p.add_argument("--precision", choices=["mixed", "fp32", "fp16-noscale"], default=d.precision)
    p.add_argument("--f16", choices=["native", "emulated", "auto"], default=d.f16,
                   help="f16 path: native needs the adapter's shader-f16 feature; auto picks it when present")
    p.add_argument("--steps", type=int, default=d.steps)
    p.add_argument("--batch-size", type=int, default=d.batch_size)
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--schedule", choices=["cosine", "constant"], default=d.schedule)
    p.add_argument("--warmup", type=int, default=d.warmup, help="linear warmup steps")
    p.add_argument("--min-lr", type=float, default=d.min_lr)
    p.add_argument("--weight-decay", type=float, default=d.weight_decay)
    p.add_argument("--init-scale", type=float, default=d.init_scale)
    p.add_argument("--growth-factor", type=float, default=d.growth_factor)
    p.add_argument("--backoff-factor", type=float, default=d.backoff_factor)
    p.add_argument("--growth-interval", type=int, default=d.growth_interval)
    p.add_argument("--hysteresis", type=int, default=d.hysteresis,
                   help="overflows tolerated before the scale backs off (1 = PyTorch)")
    p.add_argument("--min-scale", type=float, default=d.min_scale)
    p.add_argument("--min-scale-policy", choices=["raise", "warn"], default=d.min_scale_policy)
    p.add_argument("--clip-norm", type=float, default=d.clip_norm, help="max global grad norm (0 = off)")
    p.add_argument("--init-gain", type=float, default=d.init_gain)
    p.add_argument("--input-scale", type=float, default=d.input_scale)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--log-every", type=int, default=d.log_every)
    p.add_argument("--checkpoint-every", type=int, default=d.checkpoint_every)


def config_from_args(args) -> TrainConfig:
    names = set(TrainConfig.model_fields)
    return TrainConfig(**{k: v for k, v in vars(args).items() if k in names})


def cmd_train(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="webmp train", description="Train an MLP in mixed precision on WebGPU")
    add_train_flags(p)
    p.add_argument("--out", help="run directory (default: runs/run-<time>)")
    p.add_argument("--resume", help="run directory or checkpoint to continue from")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    try:
        cfg = config_from_args(args)
    except ValidationError as e:
        print(f"webmp train: {config_error_message(e)}", file=sys.stderr)
        return 2
    from .train import ScaleCollapseError, Trainer
    try:
        Trainer(cfg, out=args.out, resume=args.resume, progress=not args.quiet).run()
    except ScaleCollapseError as e:
        print(f"webmp train: {e}", file=sys.stderr)
        return 3
    except (RuntimeError, ValueError, FileNotFoundError) as e:
        print(f"webmp train: {e}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    commands = {"train": "train a model natively through wgpu-py",
                "serve": "serve the browser runtime (FastAPI) on 127.0.0.1",
                "bench": "benchmark kernels, step overhead and memory"}
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in commands:
        if argv and argv[0] not in ("-h", "--help"):
            print(f"webmp: unknown command {argv[0]!r}", file=sys.stderr)
        print("usage: webmp {train,serve,bench} [options]\n" +
              "\n".join(f"  {k:6} {v}" for k, v in commands.items()))
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "train":
        return cmd_train(rest)
    if cmd == "serve":
        from .server import cli_serve
        return cli_serve(rest)
    from .bench import cli_bench
    return cli_bench(rest)


if __name__ == "__main__":
    sys.exit(main())
