"""The interop scripts' shared check counter: one line per check, then `NAME: N passed, N
failed`; `exit_code()` is 1 on any failure."""

import sys


class Checks:
    def __init__(self, name):
        self.name = name
        self.passed = 0
        self.failed = 0

    def __call__(self, label, ok, detail=""):
        if ok:
            self.passed += 1
            print(f"ok   {label}")
        else:
            self.failed += 1
            print(f"FAIL {label}: {str(detail)[:600]}")
        sys.stdout.flush()

    def summary(self):
        print(f"{self.name}: {self.passed} passed, {self.failed} failed")
        return 1 if self.failed else 0
