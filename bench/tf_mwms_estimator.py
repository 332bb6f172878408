"""Peer benchmark: TensorFlow 2.15 Estimator + MultiWorkerMirroredStrategy, N worker processes on 127.0.0.1.

Without --task-index this is the launcher: it picks free ports, starts one
process per worker with its TF_CONFIG (no chief, so worker 0 is chief, as in
TensorFlow), waits, collects each worker's JSON and prints the aggregate:
examples/s of the whole cluster over the timed window. With --task-index it is
one worker (TF_CONFIG must be set), running train_and_evaluate.

    bench/.venv-tf/bin/python bench/tf_mwms_estimator.py --workers 2 --steps 300

`--batch-size` is per worker (per replica), as an Estimator input_fn returns it
under a distribution strategy; the global batch is workers x batch-size.
"""

import time

T_SCRIPT = time.time()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _tfcommon as common  # noqa: E402

T_PROCESS = common.process_start_epoch()


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--task-index", type=int, default=None, help="internal: run as this worker")
    p.add_argument("--threads", type=int, default=None,
                   help="per worker: intra/inter-op threads (default: TF's defaults); workers are not pinned")
    p.add_argument("--steps", type=int, default=300, help="timed steps after warm-up (default 300)")
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--batch-size", type=int, default=64, help="per worker (default 64)")
    p.add_argument("--timeout", type=float, default=300.0, help="launcher: seconds before the workers are killed")
    p.add_argument("--data-dir", default=common.DATA_DIR)
    p.add_argument("--model-dir", default=None)
    a = p.parse_args()
    if a.workers < 1 or a.steps < 1 or a.warmup < 0 or a.batch_size < 1:
        p.error("--workers, --steps and --batch-size must be >= 1, --warmup >= 0")
    return a


def launch(args):
    env_start = common.environment_report()
    ports = common.free_ports(args.workers)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    model_dir = args.model_dir or tempfile.mkdtemp(prefix="tf_mwms_")
    log_dir = tempfile.mkdtemp(prefix="tf_mwms_logs_")
    procs = []
    try:
        for i in range(args.workers):
            env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}}))
            cmd = [sys.executable, os.path.abspath(__file__), "--task-index", str(i), "--workers", str(args.workers),
                   "--steps", str(args.steps), "--warmup", str(args.warmup), "--batch-size", str(args.batch_size),
                   "--data-dir", args.data_dir, "--model-dir", model_dir]
            if args.threads is not None:
                cmd += ["--threads", str(args.threads)]
            err = open(os.path.join(log_dir, f"worker{i}.log"), "w")
            procs.append((subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=err, text=True), err))
        deadline = time.time() + args.timeout
        outputs = []
        for i, (proc, err) in enumerate(procs):
            try:
                out, _ = proc.communicate(timeout=max(1.0, deadline - time.time()))
            except subprocess.TimeoutExpired:
                raise common.BenchError(f"worker {i} did not finish within --timeout {args.timeout}s") from None
            err.close()
            if proc.returncode != 0:
                with open(err.name) as f:
                    tail = f.read()[-3000:]
                raise common.BenchError(f"worker {i} exited with {proc.returncode}; its log ends:\n{tail}")
            try:
                outputs.append(json.loads(out))
            except ValueError:
                raise common.BenchError(f"worker {i} printed no JSON report: {out[-500:]!r}") from None
    finally:
        for proc, err in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
            err.close()
        shutil.rmtree(log_dir, ignore_errors=True)
        if args.model_dir is None:
            shutil.rmtree(model_dir, ignore_errors=True)

    window = max(o["timed_wall_s"] for o in outputs)
    steps = outputs[0]["timed_steps"]
    global_batch = args.batch_size * args.workers
    report = {
        "bench": "tf_mwms_estimator",
        "tensorflow": outputs[0]["tensorflow"],
        "workers": args.workers,
        "threads_per_worker": args.threads,
        "batch_size_per_worker": args.batch_size,
        "global_batch_size": global_batch,
        "warmup_steps": args.warmup,
        "timed_steps": steps,
        "examples_per_s": steps * global_batch / window,
        "wall_ms_per_step": window * 1e3 / steps,
        "cpu_ms_per_step_all_workers": sum(o["cpu_ms_per_step"] for o in outputs),
        "process_start_to_first_step_s_max": max(o.get("process_start_to_first_step_s") or 0 for o in outputs),
        "per_worker": outputs,
        "env_start": env_start,
        "loadavg_end": list(os.getloadavg()),
    }
    json.dump(report, sys.stdout, indent=1)
    sys.stdout.write("\n")


def worker(args):
    if "TF_CONFIG" not in os.environ:
        raise common.BenchError("--task-index given but TF_CONFIG is not set (run without --task-index to launch)")
    common.quiet_tensorflow()
    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")
    train_x, train_y = common.load_fashion_mnist("train", args.data_dir)
    test_x, test_y = common.load_fashion_mnist("test", args.data_dir)
    session_config = None
    if args.threads is not None:
        session_config = tf.compat.v1.ConfigProto(
            intra_op_parallelism_threads=args.threads, inter_op_parallelism_threads=args.threads
        )
    strategy = tf.distribute.experimental.MultiWorkerMirroredStrategy()
    config = tf.estimator.RunConfig(
        model_dir=args.model_dir, tf_random_seed=42, session_config=session_config, train_distribute=strategy
    )
    estimator = tf.estimator.Estimator(model_fn=common.make_model_fn(0.05), config=config)
    hook = common.make_timing_hook(args.warmup, args.steps, T_SCRIPT, T_PROCESS)
    train_spec = tf.estimator.TrainSpec(
        input_fn=common.make_train_input_fn(train_x, train_y, args.batch_size),
        max_steps=args.warmup + args.steps,
        hooks=[hook],
    )
    # No evaluator task in the cluster, so no evaluation runs; EvalSpec is required by the API.
    eval_spec = tf.estimator.EvalSpec(input_fn=common.make_eval_input_fn(test_x, test_y, 1000), steps=None)
    tf.estimator.train_and_evaluate(estimator, train_spec, eval_spec)
    report = {"task_index": args.task_index, "tensorflow": tf.__version__,
              "num_replicas": strategy.num_replicas_in_sync, "threads": args.threads,
              "interpreter_startup_s": (T_SCRIPT - T_PROCESS) if T_PROCESS is not None else None}
    report.update(hook.report(args.batch_size))
    if "timed_wall_s" not in report:
        raise common.BenchError(f"worker {args.task_index} stopped after {hook.steps_done} steps, "
                                f"before the timed window ended")
    json.dump(report, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    a = parse_args()
    try:
        worker(a) if a.task_index is not None else launch(a)
    except common.BenchError as e:
        print(f"tf_mwms_estimator: {e}", file=sys.stderr)
        sys.exit(2)
