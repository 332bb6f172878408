"""Peer benchmark: TensorFlow 2.15's Estimator training the tutorial CNN on Fashion-MNIST.

Kept so that the command lines in bench/README.md, BENCHMARKS.md and run_peers.sh stay
valid: it is `bench/tf_estimator.py --model cnn` with this script's old defaults (300
timed steps after 50 warm-up steps, the Estimator's default logging every 100 steps)
and the same JSON report (`"bench":
"tf_estimator_cnn"`). Run with bench/.venv-tf/bin/python (see bench/setup.sh).

    bench/.venv-tf/bin/python bench/tf_estimator_cnn.py --threads 1 --steps 300
    bench/.venv-tf/bin/python bench/tf_estimator_cnn.py --eval      # 2814 steps, test accuracy
"""

import time

T_SCRIPT = time.time()  # first thing: everything after the interpreter is up counts

import os  # noqa: E402
import sys  # noqa: E402

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tf_estimator  # noqa: E402

if __name__ == "__main__":
    # Options given on the command line come later and so win over these defaults.
    defaults = ["--model", "cnn", "--steps", "300", "--warmup", "50", "--log-every", "100"]
    sys.exit(tf_estimator.cli(defaults + sys.argv[1:],
                              t_script=T_SCRIPT, prog="tf_estimator_cnn"))
