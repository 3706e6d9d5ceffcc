"""_pydantic_ai.py with the model's answers streamed (its ``--stream``): a streamed model
request is journaled as its final response, so a resume pays for it once too.

usage: python _pydantic_ai_stream.py DB LEDGER_URL MODEL_LOG RUN_ID:CRASH...
"""

import runpy
import sys
from pathlib import Path

sys.argv.append("--stream")
runpy.run_path(str(Path(__file__).with_name("_pydantic_ai.py")), run_name="__main__")
