"""Peer benchmark: TensorFlow 2.15 Estimator + ParameterServerStrategy (asynchronous), on 127.0.0.1.

Without --task this is the launcher: it picks free ports, starts a chief,
`--workers - 1` workers and `--ps` ps tasks, each with its TF_CONFIG, waits for
the training tasks, collects each one's JSON and prints the aggregate: the
updates the whole cluster applied per second over the chief's timed window (the
global step's change, as the chief's global_step/sec log reports it) times the
batch. The sum of the tasks' own rates is reported too; it overstates the
aggregate when their windows do not overlap. The ps tasks serve until killed, as
TensorFlow's do. With --task it is one task (TF_CONFIG must be set), running
train_and_evaluate with `tf.compat.v1.distribute.experimental.ParameterServerStrategy`.

    bench/.venv-tf/bin/python bench/tf_ps_estimator.py --workers 2 --ps 1 --steps 300

`--batch-size` is per training task: every update is one task's batch.
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
    p.add_argument("--ps", type=int, default=1)
    p.add_argument("--task", default=None, help="internal: run as this task (chief, worker:N, ps:N)")
    p.add_argument("--threads", type=int, default=None,
                   help="per worker: intra/inter-op threads (default: TF's defaults); workers are not pinned")
    p.add_argument("--steps", type=int, default=300, help="timed steps after warm-up (default 300)")
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--batch-size", type=int, default=64, help="per worker (default 64)")
    p.add_argument("--timeout", type=float, default=300.0, help="launcher: seconds before the workers are killed")
    p.add_argument("--data-dir", default=common.DATA_DIR)
    p.add_argument("--model-dir", default=None)
    a = p.parse_args()
    if a.workers < 1 or a.ps < 1 or a.steps < 1 or a.warmup < 0 or a.batch_size < 1:
        p.error("--workers, --ps, --steps and --batch-size must be >= 1, --warmup >= 0")
    return a


def launch(args):
    env_start = common.environment_report()
    ports = common.free_ports(args.workers + args.ps)
    addr = [f"127.0.0.1:{p}" for p in ports]
    cluster = {"chief": addr[:1], "ps": addr[args.workers:]}
    if args.workers > 1:
        cluster["worker"] = addr[1:args.workers]
    tasks = [("chief", 0)] + [("worker", i) for i in range(args.workers - 1)] + [("ps", i) for i in range(args.ps)]
    model_dir = args.model_dir or tempfile.mkdtemp(prefix="tf_ps_")
    log_dir = tempfile.mkdtemp(prefix="tf_ps_logs_")
    procs = []
    try:
        for kind, i in tasks:
            env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": kind, "index": i}}))
            cmd = [sys.executable, os.path.abspath(__file__), "--task", f"{kind}:{i}", "--workers", str(args.workers),
                   "--ps", str(args.ps), "--steps", str(args.steps), "--warmup", str(args.warmup),
                   "--batch-size", str(args.batch_size), "--data-dir", args.data_dir, "--model-dir", model_dir]
            if args.threads is not None:
                cmd += ["--threads", str(args.threads)]
            err = open(os.path.join(log_dir, f"{kind}{i}.log"), "w")
            procs.append((kind, i, subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=err, text=True), err))
        deadline = time.time() + args.timeout
        outputs = []
        for kind, i, proc, err in procs:
            if kind == "ps":
                continue
            try:
                out, _ = proc.communicate(timeout=max(1.0, deadline - time.time()))
            except subprocess.TimeoutExpired:
                raise common.BenchError(f"{kind}:{i} did not finish within --timeout {args.timeout}s") from None
            err.close()
            if proc.returncode != 0:
                with open(err.name) as f:
                    tail = f.read()[-3000:]
                raise common.BenchError(f"{kind}:{i} exited with {proc.returncode}; its log ends:\n{tail}")
            try:
                outputs.append(json.loads(out))
            except ValueError:
                raise common.BenchError(f"{kind}:{i} printed no JSON report: {out[-500:]!r}") from None
    finally:
        for _, _, proc, err in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
            err.close()
        shutil.rmtree(log_dir, ignore_errors=True)
        if args.model_dir is None:
            shutil.rmtree(model_dir, ignore_errors=True)

    report = {
        "bench": "tf_ps_estimator",
        "tensorflow": outputs[0]["tensorflow"],
        "training_tasks": args.workers,
        "ps_tasks": args.ps,
        "threads_per_task": args.threads,
        "batch_size_per_task": args.batch_size,
        "warmup_steps": args.warmup,
        "timed_steps_per_task": args.steps,
        # The chief's view of the global step: updates applied by the whole cluster.
        "examples_per_s": next(o for o in outputs if o["task"].startswith("chief"))["global_steps_per_s"] * args.batch_size,
        "sum_of_task_examples_per_s": sum(o["examples_per_s"] for o in outputs),
        "cpu_ms_per_step_all_tasks": sum(o["cpu_ms_per_step"] for o in outputs),
        "process_start_to_first_step_s_max": max(o.get("process_start_to_first_step_s") or 0 for o in outputs),
        "per_task": outputs,
        "env_start": env_start,
        "loadavg_end": list(os.getloadavg()),
    }
    json.dump(report, sys.stdout, indent=1)
    sys.stdout.write("\n")


def global_rate_hook(tf, warmup, timed_steps):
    """Updates the whole cluster applied per second, seen from this task: the global step's
    change over this task's timed window (what the chief's global_step/sec log reports)."""

    class GlobalRate(tf.estimator.SessionRunHook):
        def __init__(self):
            self.local = 0
            self.marks = []

        def before_run(self, run_context):
            return tf.estimator.SessionRunArgs(tf.compat.v1.train.get_global_step())

        def after_run(self, run_context, run_values):
            self.local += 1
            if self.local in (warmup, warmup + timed_steps):
                self.marks.append((time.perf_counter(), int(run_values.results)))

        def steps_per_s(self):
            if len(self.marks) < 2:
                return None
            (t0, g0), (t1, g1) = self.marks[:2]
            return (g1 - g0) / (t1 - t0)

    return GlobalRate()


def task(args):
    if "TF_CONFIG" not in os.environ:
        raise common.BenchError("--task given but TF_CONFIG is not set (run without --task to launch)")
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
    strategy = tf.compat.v1.distribute.experimental.ParameterServerStrategy()
    config = tf.estimator.RunConfig(
        model_dir=args.model_dir, tf_random_seed=42, session_config=session_config, train_distribute=strategy,
        save_checkpoints_steps=None, save_checkpoints_secs=None, save_summary_steps=100,
    )
    estimator = tf.estimator.Estimator(model_fn=common.make_model_fn(0.05), config=config)
    hook = common.make_timing_hook(args.warmup, args.steps, T_SCRIPT, T_PROCESS)
    rate = global_rate_hook(tf, args.warmup, args.steps)
    # Each task stops at the end of its own timed window (the hook asks it to); the
    # global step limit is only a bound.
    train_spec = tf.estimator.TrainSpec(
        input_fn=common.make_train_input_fn(train_x, train_y, args.batch_size),
        max_steps=10 * args.workers * (args.warmup + args.steps),
        hooks=[hook, rate],
    )
    eval_spec = tf.estimator.EvalSpec(input_fn=common.make_eval_input_fn(test_x, test_y, 1000), steps=None)
    tf.estimator.train_and_evaluate(estimator, train_spec, eval_spec)
    report = {"task": args.task, "global_steps_per_s": rate.steps_per_s(), "tensorflow": tf.__version__, "threads": args.threads,
              "interpreter_startup_s": (T_SCRIPT - T_PROCESS) if T_PROCESS is not None else None}
    report.update(hook.report(args.batch_size))
    if "timed_wall_s" not in report:
        raise common.BenchError(f"{args.task} stopped after {hook.steps_done} steps, before the timed window ended")
    json.dump(report, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    a = parse_args()
    try:
        task(a) if a.task is not None else launch(a)
    except common.BenchError as e:
        print(f"tf_ps_estimator: {e}", file=sys.stderr)
        sys.exit(2)
