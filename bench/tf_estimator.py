"""Peer benchmark: TensorFlow 2.15's Estimator training one of the benchmark models on Fashion-MNIST.

`--model cnn|mlp|residual|vgg` picks the TensorFlow twin (bench/_tfmodels.py) of
specs/fashion_mnist_<model>.ron; the batch size, the length of an `--eval` run and the
checkpoint interval are read from that spec, so that this side and bench/engine_cnn.py
train the same workload. Prints one JSON object on stdout: examples/s, wall and CPU ms
per step over the timed steps (after warm-up), and the time from process start to the
end of the first training step. Run with bench/.venv-tf/bin/python (see bench/setup.sh).

    bench/.venv-tf/bin/python bench/tf_estimator.py --model mlp --threads 1
    bench/.venv-tf/bin/python bench/tf_estimator.py --model vgg --threads 2 --steps 30 --warmup 5
    bench/.venv-tf/bin/python bench/tf_estimator.py --model residual --eval   # spec's max_steps, test accuracy
"""

import time

T_SCRIPT = time.time()  # first thing: everything after the interpreter is up counts

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _models  # noqa: E402
import _tfcommon as common  # noqa: E402

T_PROCESS = common.process_start_epoch()


def parse_args(argv, prog):
    p = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=sorted(_models.MODELS), default="cnn",
                   help="which spec's twin to train (default cnn)")
    p.add_argument("--threads", type=int, default=None,
                   help="pin to N CPUs and set intra/inter-op threads to N (default: TF's defaults, all CPUs)")
    p.add_argument("--steps", type=int, default=None,
                   help="timed steps after warm-up (default per model, as compare.py: "
                        + _models.defaults_text("steps") + ")")
    p.add_argument("--warmup", type=int, default=None,
                   help="untimed steps first (default per model: " + _models.defaults_text("warmup") + ")")
    p.add_argument("--batch-size", type=int, default=None, help="default: the spec's train_input.batch_size")
    p.add_argument("--log-every", type=int, default=None,
                   help="RunConfig.log_step_count_steps, set to what engine_cnn.py gives the engine (default: "
                        "the largest divisor of --warmup and --steps up to 100, i.e. 100 for the usual runs)")
    p.add_argument("--eval", action="store_true",
                   help="train the spec's train_spec.max_steps and report test accuracy")
    p.add_argument("--seed", type=int, default=42, help="graph-level seed (RunConfig.tf_random_seed)")
    p.add_argument("--data-dir", default=common.DATA_DIR)
    p.add_argument("--model-dir", default=None, help="default: a temporary directory, removed afterwards")
    a = p.parse_args(argv)
    try:
        a.facts = _models.spec_facts(_models.spec_path(a.model))
    except _models.SpecError as e:
        p.error(str(e))
    defaults = _models.MODELS[a.model]
    a.steps = defaults["steps"] if a.steps is None else a.steps
    a.warmup = defaults["warmup"] if a.warmup is None else a.warmup
    a.batch_size = a.facts["batch_size"] if a.batch_size is None else a.batch_size
    if a.steps < 1 or a.warmup < 0 or a.batch_size < 1 or (a.log_every is not None and a.log_every < 1):
        p.error("--steps, --batch-size and --log-every must be >= 1, --warmup >= 0")
    if a.eval:
        a.steps = a.facts["max_steps"] - a.warmup
        if a.steps < 1:
            p.error(f"--warmup must be below the spec's max_steps ({a.facts['max_steps']}) with --eval")
    if a.log_every is None:
        a.log_every = _models.default_log_every(a.warmup, 100 if a.eval else a.steps)
    return a


def main(argv=None, t_script=T_SCRIPT, prog=None):
    args = parse_args(argv, prog)
    cpus = common.apply_threads(args.threads)
    common.quiet_tensorflow()
    env = common.environment_report()

    import tensorflow as tf
    import _tfmodels

    tf.get_logger().setLevel("ERROR")
    t_imported = time.time()

    train_x, train_y = common.load_fashion_mnist("train", args.data_dir)
    session_config = None
    if args.threads is not None:
        session_config = tf.compat.v1.ConfigProto(
            intra_op_parallelism_threads=args.threads, inter_op_parallelism_threads=args.threads
        )
    name = f"tf_estimator_{args.model}"
    model_dir = args.model_dir or tempfile.mkdtemp(prefix=name + "_")
    try:
        # Checkpoint as the spec's run_config does; without save_checkpoints_steps both
        # frameworks save every 600 s (and at the start and the end).
        ckpt = args.facts["save_checkpoints_steps"]
        config = tf.estimator.RunConfig(
            model_dir=model_dir, tf_random_seed=args.seed, session_config=session_config,
            log_step_count_steps=args.log_every,
            **({"save_checkpoints_steps": ckpt} if ckpt else {}),
        )
        estimator = tf.compat.v1.estimator.Estimator(model_fn=_tfmodels.make_model_fn(args.model), config=config)
        hook = common.make_timing_hook(args.warmup, args.steps, t_script, T_PROCESS)
        estimator.train(
            common.make_train_input_fn(train_x, train_y, args.batch_size, seed=args.seed),
            hooks=[hook],
            max_steps=args.warmup + args.steps,
        )
        report = {
            "bench": name,
            "model": args.model,
            "spec": _models.MODELS[args.model]["spec"],
            "tensorflow": tf.__version__,
            "threads": args.threads,
            "cpus": cpus,
            "batch_size": args.batch_size,
            "warmup_steps": args.warmup,
            "log_every": args.log_every,
            "save_checkpoints_steps": ckpt,
            "seed": args.seed,
            "interpreter_startup_s": (t_script - T_PROCESS) if T_PROCESS is not None else None,
            "import_tensorflow_s": t_imported - t_script,
        }
        report.update(hook.report(args.batch_size))
        if args.eval:
            test_x, test_y = common.load_fashion_mnist("test", args.data_dir)
            metrics = estimator.evaluate(common.make_eval_input_fn(test_x, test_y, 1000))
            report["eval"] = {k: float(v) for k, v in metrics.items()}
        report["env_start"] = env
        report["loadavg_end"] = list(os.getloadavg())
    finally:
        if args.model_dir is None:
            shutil.rmtree(model_dir, ignore_errors=True)
    json.dump(report, sys.stdout, indent=1)
    sys.stdout.write("\n")


def cli(argv=None, t_script=T_SCRIPT, prog=None):
    """Runs main; a BenchError becomes a one-line message and exit status 2."""
    try:
        main(argv, t_script, prog)
    except common.BenchError as e:
        print(f"{prog or 'tf_estimator'}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(cli())
