"""The examples in docs/ run as written: a user copies them."""

import json
import re
import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).parent.parent / "docs"


def extract_files(markdown: str) -> dict[str, str]:
    blocks = re.findall(r"```python\n# file: (\S+)\n(.*?)```", markdown, flags=re.S)
    return {name: body for name, body in blocks}


def test_tasks_md_example_passes_the_judge(tmp_path):
    files = extract_files((DOCS / "tasks.md").read_text())
    assert set(files) == {"gelu_task.py", "gelu_kernel.py"}
    for name, body in files.items():
        (tmp_path / name).write_text(body)
    proc = subprocess.run([sys.executable, "-m", "ratchet", "eval", "gelu_task.py", "gelu_kernel.py",
                           "--device", "cpu", "--json", "--config", '{"CHUNK": 256}'],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    out = json.loads(proc.stdout)
    assert proc.returncode == 0, out["reasons"]
    assert out["verdict"] == "pass" and out["config"] == {"CHUNK": 256}
    assert {row["dtype"] for row in out["shapes"]} == {"bfloat16", "float32"}
    assert sum(row["held_out"] for row in out["shapes"]) == 4  # two held-out shapes per dtype
