"""Pieces shared by the two TensorFlow peer benchmarks.

The model, input pipeline and timing hook are kept in one place so that the
single-process and the MultiWorkerMirroredStrategy figures measure exactly the
same workload. Nothing here imports TensorFlow at module level: the scripts
must set thread counts and CPU affinity *before* TensorFlow starts its pools.
"""

import gzip
import os
import socket
import struct
import time

DATA_DIR = "/usr/share/datasets/fashion-mnist"
TRAIN_IMAGES = "train-images-idx3-ubyte.gz"
TRAIN_LABELS = "train-labels-idx1-ubyte.gz"
TEST_IMAGES = "t10k-images-idx3-ubyte.gz"
TEST_LABELS = "t10k-labels-idx1-ubyte.gz"


class BenchError(Exception):
    """A problem with the inputs or the environment, reported without a traceback."""


def process_start_epoch():
    """Wall-clock time at which the kernel started this process (exec of python).

    /proc/self/stat field 22 is the start time in clock ticks after boot; with
    /proc/uptime (10 ms resolution) that gives the process age, which is more
    precise than /proc/stat's whole-second btime. Returns None off Linux.
    """
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read().decode()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        now = time.time()
        # The command name (field 2) may contain spaces; fields resume after ')'.
        fields = stat[stat.rindex(")") + 2:].split()
        start_ticks = int(fields[19])  # field 22 overall
        age = uptime - start_ticks / os.sysconf("SC_CLK_TCK")
        return now - age
    except (OSError, ValueError, IndexError):
        return None


def free_ports(n):
    """n distinct free TCP ports on 127.0.0.1 (held together while chosen)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def apply_threads(threads):
    """Pins the process to `threads` CPUs and sets the thread-count variables.

    Must run before TensorFlow is imported: its pools read these at start-up,
    and threads created later inherit the affinity mask.
    Returns the CPUs the process is allowed to run on.
    """
    if threads is not None:
        if threads < 1:
            raise BenchError(f"--threads must be >= 1, got {threads}")
        allowed = sorted(os.sched_getaffinity(0))
        if threads > len(allowed):
            raise BenchError(f"--threads {threads} but only {len(allowed)} CPUs are available: {allowed}")
        os.sched_setaffinity(0, set(allowed[:threads]))
        for var in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS"):
            os.environ[var] = str(threads)
    return sorted(os.sched_getaffinity(0))


def quiet_tensorflow():
    # Keeps stdout clean for the JSON report; TF's C++ INFO/WARNING lines go away.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _read_idx(path, magic, ndim):
    try:
        with gzip.open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise BenchError(
            f"{path}: not found (install it with `apt-get install -y dataset-fashion-mnist`)"
        ) from None
    except (OSError, EOFError) as e:
        raise BenchError(f"{path}: cannot read gzip data: {e}") from None
    header = 4 + 4 * ndim
    if len(data) < header:
        raise BenchError(f"{path}: truncated IDX header ({len(data)} bytes)")
    got_magic = struct.unpack(">I", data[:4])[0]
    if got_magic != magic:
        raise BenchError(f"{path}: IDX magic {got_magic:#010x}, expected {magic:#010x}")
    dims = struct.unpack(">" + "I" * ndim, data[4:header])
    count = 1
    for d in dims:
        count *= d
    if len(data) - header != count:
        raise BenchError(f"{path}: header says {dims} = {count} bytes of data, file has {len(data) - header}")
    import numpy as np

    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(dims)


def load_fashion_mnist(split, data_dir=DATA_DIR):
    """Returns (images uint8 [N,28,28,1], labels int64 [N]) for 'train' or 'test'."""
    images_name, labels_name = (TRAIN_IMAGES, TRAIN_LABELS) if split == "train" else (TEST_IMAGES, TEST_LABELS)
    images = _read_idx(os.path.join(data_dir, images_name), 2051, 3)
    labels = _read_idx(os.path.join(data_dir, labels_name), 2049, 1)
    if images.shape[0] != labels.shape[0]:
        raise BenchError(f"{data_dir}: {images.shape[0]} images but {labels.shape[0]} labels in split {split}")
    if labels.size and int(labels.max()) > 9:
        raise BenchError(f"{os.path.join(data_dir, labels_name)}: label {int(labels.max())} is out of range 0..9")
    return images[..., None], labels.astype("int64")


def make_train_input_fn(images, labels, batch_size, seed=1):
    """input_fn for training: reshuffled every epoch, repeated forever, batch `batch_size`.

    Batches are cut in numpy and handed over through from_generator: turning the
    arrays into a tf.constant would embed 47 MB into the GraphDef, which the
    Estimator then writes out as graph.pbtxt and into the summary file, adding
    seconds to the first step that no user would pay. Under a distribution
    strategy the input_fn receives an InputContext and reads only its shard
    (pipelines = workers), and `batch_size` is the per-replica batch.
    """
    import numpy as np
    import tensorflow as tf

    def input_fn(mode=None, input_context=None):
        shard, num_shards = 0, 1
        if input_context is not None:
            shard, num_shards = input_context.input_pipeline_id, input_context.num_input_pipelines
        x_all, y_all = images[shard::num_shards], labels[shard::num_shards]

        def batches():
            rng = np.random.default_rng(seed + shard)
            while True:
                order = rng.permutation(len(x_all))
                for i in range(0, len(order) - batch_size + 1, batch_size):
                    idx = order[i:i + batch_size]
                    yield x_all[idx], y_all[idx]

        ds = tf.data.Dataset.from_generator(
            batches,
            output_signature=(
                tf.TensorSpec([batch_size, 28, 28, 1], tf.uint8),
                tf.TensorSpec([batch_size], tf.int64),
            ),
        )
        ds = ds.map(lambda x, y: (tf.cast(x, tf.float32) / 255.0, y))
        return ds.prefetch(2)

    return input_fn


def make_eval_input_fn(images, labels, batch_size=1000):
    import tensorflow as tf

    def input_fn():
        n = len(images)

        def batches():
            for i in range(0, n, batch_size):
                yield images[i:i + batch_size], labels[i:i + batch_size]

        ds = tf.data.Dataset.from_generator(
            batches,
            output_signature=(
                tf.TensorSpec([None, 28, 28, 1], tf.uint8),
                tf.TensorSpec([None], tf.int64),
            ),
        )
        return ds.map(lambda x, y: (tf.cast(x, tf.float32) / 255.0, y))

    return input_fn


def make_model_fn(learning_rate=0.05):
    """The TensorFlow tutorial CNN as an Estimator model_fn (SGD, sparse softmax CE)."""
    import tensorflow as tf

    def model_fn(features, labels, mode):
        x = tf.keras.layers.Conv2D(32, 3, activation="relu")(features)
        x = tf.keras.layers.MaxPooling2D(2)(x)
        x = tf.keras.layers.Flatten()(x)
        x = tf.keras.layers.Dense(64, activation="relu")(x)
        logits = tf.keras.layers.Dense(10)(x)
        predictions = tf.argmax(logits, axis=1)
        if mode == tf.estimator.ModeKeys.PREDICT:
            return tf.estimator.EstimatorSpec(mode, predictions={"class": predictions})
        loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)
        if mode == tf.estimator.ModeKeys.EVAL:
            acc = tf.compat.v1.metrics.accuracy(labels=labels, predictions=predictions)
            return tf.estimator.EstimatorSpec(mode, loss=loss, eval_metric_ops={"accuracy": acc})
        opt = tf.compat.v1.train.GradientDescentOptimizer(learning_rate)
        train_op = opt.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
        return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)

    return model_fn


def make_timing_hook(warmup, timed_steps, t_script, t_process):
    """A SessionRunHook that times the training session's run calls.

    The timed window starts when warm-up step `warmup` has finished and ends
    when step `warmup + timed_steps` has finished, so everything the Estimator
    does between steps (its own hooks, input) is inside it. CPU time is the
    process's (all threads). Stops training at the end of the window.
    """
    import tensorflow as tf

    class TimingHook(tf.estimator.SessionRunHook):
        def __init__(self):
            self.steps_done = 0
            self.first_step_end = None
            self.window = None  # (wall_start, cpu_start)
            self.step_ms = []
            self.result = None
            self._t = None

        def before_run(self, run_context):
            self._t = time.perf_counter()

        def after_run(self, run_context, run_values):
            now_perf = time.perf_counter()
            self.steps_done += 1
            if self.steps_done == 1:
                self.first_step_end = time.time()
            if self.window is not None:
                self.step_ms.append((now_perf - self._t) * 1e3)
            if self.steps_done == warmup:
                self.window = (now_perf, time.process_time())
            if self.window is not None and self.steps_done == warmup + timed_steps:
                wall = now_perf - self.window[0]
                cpu = time.process_time() - self.window[1]
                self.result = {"timed_steps": timed_steps, "wall_s": wall, "cpu_s": cpu}
                run_context.request_stop()

        def after_create_session(self, session, coord):
            if warmup == 0:
                self.window = (time.perf_counter(), time.process_time())

        def report(self, batch_size):
            out = {}
            if self.first_step_end is not None:
                out["script_start_to_first_step_s"] = self.first_step_end - t_script
                if t_process is not None:
                    out["process_start_to_first_step_s"] = self.first_step_end - t_process
            if self.result is not None:
                r = self.result
                n = r["timed_steps"]
                ms = sorted(self.step_ms)
                out.update(
                    {
                        "timed_steps": n,
                        "timed_wall_s": r["wall_s"],
                        "examples_per_s": n * batch_size / r["wall_s"],
                        "wall_ms_per_step": r["wall_s"] * 1e3 / n,
                        "session_run_ms_median": ms[len(ms) // 2] if ms else None,
                        "cpu_ms_per_step": r["cpu_s"] * 1e3 / n,
                        "cpu_cores_busy": r["cpu_s"] / r["wall_s"],
                    }
                )
            return out

    return TimingHook()


def environment_report():
    return {
        "nproc": os.cpu_count(),
        "cpus_allowed": sorted(os.sched_getaffinity(0)),
        "loadavg": list(os.getloadavg()),
        "TF_ENABLE_ONEDNN_OPTS": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default (on)"),
    }
