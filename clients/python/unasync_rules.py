"""Generates the synchronous client from the asynchronous one with unasync (run by
clients/generate.sh): arbor_client/_async/*.py -> arbor_client/_sync/*.py."""

import sys

import unasync

REPLACEMENTS = {
    "AsyncArborClient": "ArborClient",
    "AsyncClient": "Client",
    "aclose": "close",
    "aread": "read",
    "aiter_lines": "iter_lines",
    "asyncio": "time",
}

if __name__ == "__main__":
    src, dst = sys.argv[1], sys.argv[2]
    rule = unasync.Rule(fromdir=src, todir=dst, additional_replacements=REPLACEMENTS)
    unasync.unasync_files([f"{src}client.py"], rules=[rule])
