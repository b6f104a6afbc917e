"""``ratchet profile MODEL --apply PKG``: the model profiled with an exported package's kernels in (CPU):
the package's custom op shows where the model's norms were, the note says what it swapped, and a folder
that is no package, or a model that is no transformers model, is one line and exit 2."""

import json

import pytest

pytest.importorskip("transformers")

from ratchet.e2e.export import export  # noqa: E402
from ratchet.e2e.models import families  # noqa: E402
from ratchet.run.ledger import Ledger  # noqa: E402
from one_line_refusal import one_line_error, run_cli  # noqa: E402
from test_export_kernelize import _gated_rmsnorm  # noqa: E402


@pytest.fixture(scope="module")
def package_and_model(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("apply")
    ledger, run, gates = _gated_rmsnorm(tmp)
    with Ledger(ledger) as led:
        pkg = export(led, run, tmp / "pkg", gates)
    model = tmp / "llama"
    families.config("llama").save_pretrained(model)
    return pkg, f"ratchet_export_{run}", model


def test_the_profile_shows_the_packages_op_in_place_of_the_models_norms(package_and_model, capsys):
    from ratchet.cli import main

    pkg, name, model = package_and_model
    assert main(["profile", str(model), "--device", "cpu", "--steps", "1", "--prefill", "0", "--apply", str(pkg),
                 "--json"]) == 0
    prof = json.loads(capsys.readouterr().out)
    ops = {op["name"]: op for op in prof["phases"][0]["ops"]}
    assert ops[f"{name}::rmsnorm"]["calls"] == 5  # 2 layers x 2 norms + the final norm, all the package's
    assert "rmsnorm" not in {op["task"] for op in ops.values()}  # the registry's rmsnorm no longer runs
    assert prof["notes"][0] == (f"with the package {name} applied ({pkg}): it swapped norm x5; its kernels show "
                                "under their custom ops' names")
    assert not any(op["name"].startswith(name) for op in prof["no_task"])  # a kernel already, not one to make


def test_the_table_marks_the_packages_op(package_and_model, capsys):
    from ratchet.cli import main

    pkg, name, model = package_and_model
    assert main(["profile", str(model), "--device", "cpu", "--steps", "1", "--prefill", "0", "--apply", str(pkg)]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if f"{name}::rmsnorm" in line)
    assert "(package)" in row


def test_without_the_package_the_norms_are_the_registrys(package_and_model, capsys):
    from ratchet.cli import main

    _, name, model = package_and_model
    assert main(["profile", str(model), "--device", "cpu", "--steps", "1", "--prefill", "0", "--json"]) == 0
    ops = {op["name"]: op for op in json.loads(capsys.readouterr().out)["phases"][0]["ops"]}
    assert ops["rmsnorm"]["task"] == "rmsnorm" and not any(n.startswith(name) for n in ops)


@pytest.mark.parametrize("model, apply, said", [
    ("MODEL", "/nonexistent/pkg", "/nonexistent/pkg: not a package 'ratchet export' wrote"),
    ("llama", "PKG", "--apply takes a transformers model"),
])
def test_bad_apply_is_one_line_and_exit_2(package_and_model, model, apply, said, capsys):
    pkg, _, model_dir = package_and_model
    argv = ["profile", str(model_dir) if model == "MODEL" else model, "--device", "cpu", "--steps", "1",
            "--prefill", "0", "--apply", str(pkg) if apply == "PKG" else apply]
    code, _, err = run_cli(capsys, *argv)
    assert said in one_line_error(code, err)
