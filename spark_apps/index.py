"""spark-submit program for an index build: segment tasks on the executors, one commit on the driver.

``index.py --plan-uri URI --result-file PATH | --result-key KEY``
"""

import sys

from geneva_provider.core.contracts.kinds import Stage
from geneva_provider.spark_apps._runner import run_stage

if __name__ == "__main__":
    sys.exit(run_stage(Stage.INDEX))
