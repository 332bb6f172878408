"""Peer benchmark: TensorFlow 2.15's Estimator training the tutorial CNN on Fashion-MNIST.

Prints one JSON object on stdout: examples/s, wall and CPU ms per step over the
timed steps (after warm-up), and the time from process start to the end of the
first training step. Run with bench/.venv-tf/bin/python (see bench/setup.sh).

    bench/.venv-tf/bin/python bench/tf_estimator_cnn.py --threads 1 --steps 300
    bench/.venv-tf/bin/python bench/tf_estimator_cnn.py --eval      # 2814 steps, test accuracy
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
import _tfcommon as common  # noqa: E402

T_PROCESS = common.process_start_epoch()

EPOCH3_STEPS = 2814  # 3 epochs of 60000 at batch 64, as in specs/fashion_mnist_cnn.ron


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=None,
                   help="pin to N CPUs and set intra/inter-op threads to N (default: TF's defaults, all CPUs)")
    p.add_argument("--steps", type=int, default=300, help="timed steps after warm-up (default 300)")
    p.add_argument("--warmup", type=int, default=50, help="untimed steps first (default 50)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--eval", action="store_true",
                   help=f"train {EPOCH3_STEPS} steps (3 epochs) and report test accuracy")
    p.add_argument("--seed", type=int, default=42, help="graph-level seed (RunConfig.tf_random_seed)")
    p.add_argument("--data-dir", default=common.DATA_DIR)
    p.add_argument("--model-dir", default=None, help="default: a temporary directory, removed afterwards")
    a = p.parse_args()
    if a.steps < 1 or a.warmup < 0 or a.batch_size < 1:
        p.error("--steps and --batch-size must be >= 1, --warmup >= 0")
    if a.eval:
        a.steps = EPOCH3_STEPS - a.warmup
        if a.steps < 1:
            p.error(f"--warmup must be below {EPOCH3_STEPS} with --eval")
    return a


def main():
    args = parse_args()
    cpus = common.apply_threads(args.threads)
    common.quiet_tensorflow()
    env = common.environment_report()

    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")
    t_imported = time.time()

    train_x, train_y = common.load_fashion_mnist("train", args.data_dir)
    session_config = None
    if args.threads is not None:
        session_config = tf.compat.v1.ConfigProto(
            intra_op_parallelism_threads=args.threads, inter_op_parallelism_threads=args.threads
        )
    model_dir = args.model_dir or tempfile.mkdtemp(prefix="tf_estimator_cnn_")
    try:
        config = tf.estimator.RunConfig(model_dir=model_dir, tf_random_seed=args.seed, session_config=session_config)
        estimator = tf.compat.v1.estimator.Estimator(model_fn=common.make_model_fn(0.05), config=config)
        hook = common.make_timing_hook(args.warmup, args.steps, T_SCRIPT, T_PROCESS)
        estimator.train(
            common.make_train_input_fn(train_x, train_y, args.batch_size, seed=args.seed),
            hooks=[hook],
            max_steps=args.warmup + args.steps,
        )
        report = {
            "bench": "tf_estimator_cnn",
            "tensorflow": tf.__version__,
            "threads": args.threads,
            "cpus": cpus,
            "batch_size": args.batch_size,
            "warmup_steps": args.warmup,
            "seed": args.seed,
            "interpreter_startup_s": (T_SCRIPT - T_PROCESS) if T_PROCESS is not None else None,
            "import_tensorflow_s": t_imported - T_SCRIPT,
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


if __name__ == "__main__":
    try:
        main()
    except common.BenchError as e:
        print(f"tf_estimator_cnn: {e}", file=sys.stderr)
        sys.exit(2)
