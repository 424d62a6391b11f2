"""spark-submit program for the write+commit stage: ``write_commit.py --plan-uri URI [--result-file PATH]``."""

import sys

from geneva_provider.spark_apps._runner import run_stage
from geneva_provider.writer import run_write_commit

if __name__ == "__main__":
    sys.exit(run_stage("write_commit", run_write_commit))
