"""Engine vs TensorFlow 2.15 Estimator on the tutorial CNN (Fashion-MNIST, batch 64), interleaved.

Kept so that the command lines in bench/README.md and BENCHMARKS.md stay valid: it is
`bench/compare.py --model cnn` (same options, same output files
bench/results/cnn_compare.{json,md}). Standard library only.

    python3 bench/compare_cnn.py                       # 3 repetitions, 1 and 2 threads, 1000 timed steps
    python3 bench/compare_cnn.py --reps 5 --steps 2000 --wait-quiet 600
"""

import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402

if __name__ == "__main__":
    sys.exit(compare.cli(["--model", "cnn"] + sys.argv[1:], invoked_as="bench/compare_cnn.py"))
