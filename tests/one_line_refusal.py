"""The benchmarks' rule for bad arguments: one line on stderr, starting with the script's name, exit 2."""


def assert_one_line_refusal(main, args: list[str], script: str, says: str, capsys) -> None:
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{script}: ") and says in err and err.count("\n") == 1
