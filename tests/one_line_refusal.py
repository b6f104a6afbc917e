"""The rule for bad arguments: one line on stderr, starting with the script's name, exit 2; for the
benchmarks' scripts and for the ratchet command, run in the test's process."""


def assert_one_line_refusal(main, args: list[str], script: str, says: str, capsys) -> None:
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{script}: ") and says in err and err.count("\n") == 1


def run_cli(capsys, *argv):
    """``ratchet ARGV`` run in this process: (exit status, stdout, stderr)."""
    from ratchet.cli import main

    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(code, err):
    """The ratchet command refused: exit 2 and one line on stderr, ``ratchet: error: ...``; that line."""
    assert code == 2 and err.count("\n") == 1 and err.startswith("ratchet: error:"), err
    return err
