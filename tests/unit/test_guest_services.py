"""The services supervisor's rules, against a services.json that anyone with root in the guest
may have rewritten: bad entries are skipped with the reason and never stop the others; restarts
back off; a log is rotated before it passes its bound."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sanbox.guest.service_config import (
    BASE_ENV,
    LOG_LIMIT,
    MAX_SERVICES,
    Backoff,
    ConfigError,
    ServiceSpec,
    describe_exit,
    exit_record,
    load_config,
    parse_config,
    restart_wanted,
    should_rotate,
)
from sanbox.guest.service_files import ServiceLog, ServicePaths, public_status, read_statuses

pytestmark = pytest.mark.unit


def web(**kw: object) -> dict[str, object]:
    return {"name": "web", "command": "python3 -m http.server 8080", "cwd": "/srv", **kw}


def test_a_good_file_gives_its_services_with_defaults() -> None:
    config, problems = parse_config(
        {
            "env": {"MODE": "prod"},
            "services": [web(restart="on-failure"), {"name": "w2", "command": "x"}],
        }
    )
    assert problems == []
    assert config.services == (
        ServiceSpec("web", "python3 -m http.server 8080", "/srv", "on-failure"),
        ServiceSpec("w2", "x", "/root", "always"),
    )
    assert config.process_env() == {**BASE_ENV, "MODE": "prod"}


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ("web", "not an object"),
        (web(name="Web"), "invalid name"),
        (web(name="-web"), "invalid name"),
        (web(name="a" * 64), "invalid name"),
        (web(name="../etc/passwd"), "invalid name"),
        (web(name=7), "invalid name"),
        (web(command=""), "non-empty"),
        (web(command=["ls"]), "non-empty"),
        (web(command="a\0b"), "without NUL"),
        (web(command="x" * 4097), "longer than 4096"),
        (web(cwd="srv"), "absolute"),
        (web(cwd=None), "absolute"),
        (web(restart="sometimes"), "restart must be one of"),
    ],
)
def test_a_bad_entry_is_skipped_with_its_reason_and_the_others_run(
    entry: object, reason: str
) -> None:
    config, problems = parse_config({"services": [entry, web(name="ok")]})
    assert [s.name for s in config.services] == ["ok"]
    assert len(problems) == 1 and problems[0].startswith("services[0]: ")
    assert reason in problems[0] and problems[0].endswith("skipped")


def test_at_most_sixteen_services_and_one_of_each_name() -> None:
    entries = [web(name=f"s{i}") for i in range(MAX_SERVICES + 2)] + [web(name="s0")]
    config, problems = parse_config({"services": entries})
    assert [s.name for s in config.services] == [f"s{i}" for i in range(MAX_SERVICES)]
    assert sum("more than 16 services" in p for p in problems) == 3  # the last s0 included
    config, problems = parse_config({"services": [web(), web(command="other")]})
    assert [s.command for s in config.services] == ["python3 -m http.server 8080"]
    assert "a second service of that name" in problems[0]


def test_bad_env_entries_are_skipped_and_cannot_be_smuggled() -> None:
    config, problems = parse_config(
        {"env": {"GOOD": "1", "1BAD": "x", "A=B": "x", "NUL": "a\0b", "NUM": 5, "": "x"}}
    )
    assert config.env == {"GOOD": "1"}
    assert len(problems) == 5 and all(p.startswith("env: ") for p in problems)
    config, problems = parse_config({"env": ["PATH=/evil"], "services": "web"})
    assert config.env == {} and config.services == ()
    assert problems == ["env: not an object, ignored", "services: not a list, ignored"]


def test_the_file_env_is_added_to_a_clean_base() -> None:
    config, _ = parse_config({"env": {"PATH": "/opt/bin", "LANG": "fr_FR.UTF-8", "X": "y"}})
    env = config.process_env()
    assert env == {"PATH": "/opt/bin", "HOME": "/root", "LANG": "fr_FR.UTF-8", "X": "y"}


@pytest.mark.parametrize(
    "text",
    [b"", b"not json", b"[1, 2]", b'"services"', b"[" * 100_000, b" " * (4 * 1024 * 1024 + 1)],
)
def test_an_unusable_file_is_refused_whole(text: bytes) -> None:
    with pytest.raises(ConfigError):
        load_config(text)


def test_restart_policies() -> None:
    assert [restart_wanted("always", c) for c in (0, 1, -9)] == [True, True, True]
    assert [restart_wanted("on-failure", c) for c in (0, 1, -9)] == [False, True, True]
    assert [restart_wanted("never", c) for c in (0, 1, -9)] == [False, False, False]
    assert exit_record(3) == {"code": 3, "signal": None}
    assert exit_record(-9) == {"code": None, "signal": 9}
    assert (describe_exit(3), describe_exit(-9)) == ("code 3", "signal 9")


def test_backoff_doubles_to_thirty_seconds_and_resets_after_a_minute_of_running() -> None:
    backoff = Backoff()
    quick = [backoff.next_delay(0.1) for _ in range(9)]
    assert quick == [0.5, 1, 2, 4, 8, 16, 30, 30, 30]
    assert backoff.next_delay(59.9) == 30  # not quite a minute: still backing off
    assert backoff.next_delay(60.0) == 0.5  # it ran well: restart quickly
    assert backoff.next_delay(1.0) == 1


def test_a_log_is_rotated_before_it_passes_its_bound() -> None:
    assert not should_rotate(0, LOG_LIMIT)  # an empty log takes anything
    assert not should_rotate(LOG_LIMIT - 10, 10)
    assert should_rotate(LOG_LIMIT - 10, 11)
    assert should_rotate(LOG_LIMIT, 1)


def test_a_flooding_service_keeps_at_most_two_logs_of_the_bound(tmp_path: Path) -> None:
    log = ServiceLog(str(tmp_path / "logs" / "web.log"), limit=1000)
    for i in range(100):
        log.write(b"%03d" % i + b"x" * 97)
    log.close()
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == ["web.log", "web.log.1"]
    assert (tmp_path / "logs" / "web.log").read_bytes().startswith(b"090")
    assert (tmp_path / "logs" / "web.log.1").read_bytes().startswith(b"080")
    assert all((tmp_path / "logs" / n).stat().st_size == 1000 for n in ("web.log", "web.log.1"))


def test_status_files_written_by_anyone_are_checked_before_the_host_sees_them(
    tmp_path: Path,
) -> None:
    where = ServicePaths(str(tmp_path))
    status_dir = Path(where.status_dir)
    status_dir.mkdir(parents=True)
    good = {
        "name": "web",
        "state": "running",
        "pid": 42,
        "restarts": 1,
        "started_at": 1.5,
        "last_exit": {"code": None, "signal": 9},
        "proc_start": 7,
    }
    (status_dir / "web.json").write_text(json.dumps(good))
    (status_dir / "other.json").write_text(json.dumps({**good, "name": "web"}))  # name mismatch
    (status_dir / "bad.json").write_text(json.dumps({**good, "name": "bad", "state": "pwned"}))
    (status_dir / "junk.json").write_text("{")
    (status_dir / "Upper.json").write_text(json.dumps({**good, "name": "Upper"}))
    (status_dir / ".web.json.tmp").write_text(json.dumps(good))
    [status] = read_statuses(where)
    assert status == {k: v for k, v in good.items() if k != "proc_start"}
    assert public_status({**good, "pid": True}) is None
    assert public_status({**good, "last_exit": {"code": "1", "signal": None}}) is None
    assert read_statuses(ServicePaths(str(tmp_path / "nothing"))) == []
