"""A build context carries the spec and the files it copies, nothing else; a hostile tar (links,
absolute or climbing paths, too many or too big files) is refused before anything is built. Step
keys change from the changed step on, and never match across orgs."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from sanbox.templates.context import MAX_FILES, ContextError, pack, read_inside, unpack
from sanbox.templates.keys import step_keys
from sanbox.templates.spec import SpecError

pytestmark = pytest.mark.unit

SPEC = """
name = "t"
[[steps]]
copy = "notes.txt"
to = "/srv/notes.txt"
[[steps]]
run = "echo one"
"""


def tar_of(members: list[tarfile.TarInfo], data: dict[str, bytes] | None = None) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for m in members:
            body = (data or {}).get(m.name, b"")
            m.size = len(body) if m.isreg() else 0
            tar.addfile(m, io.BytesIO(body) if m.isreg() else None)
    return out.getvalue()


def regular(name: str) -> tarfile.TarInfo:
    return tarfile.TarInfo(name)


def test_pack_sends_the_spec_and_the_files_it_copies_only(tmp_path: Path) -> None:
    (tmp_path / "sanbox.toml").write_text(SPEC)
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / ".env").write_text("SECRET=1")
    data, spec = pack(tmp_path)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        assert sorted(tar.getnames()) == ["notes.txt", "sanbox.toml"]
    ctx = unpack(data)
    assert ctx.files == {"notes.txt": b"hello"} and ctx.spec == spec


def test_pack_refuses_a_missing_copied_file(tmp_path: Path) -> None:
    (tmp_path / "sanbox.toml").write_text(SPEC)
    with pytest.raises(ContextError, match="notes.txt, which is not a file"):
        pack(tmp_path)


@pytest.mark.parametrize(
    ("member", "reason"),
    [
        (tarfile.TarInfo("/etc/passwd"), "not a relative path"),
        (tarfile.TarInfo("../up"), "not a relative path"),
    ],
)
def test_unpack_refuses_paths_outside_the_context(member: tarfile.TarInfo, reason: str) -> None:
    data = tar_of([regular("sanbox.toml"), member], {"sanbox.toml": SPEC.encode()})
    with pytest.raises(ContextError, match=reason):
        unpack(data)


def test_unpack_refuses_links_and_devices() -> None:
    link = tarfile.TarInfo("notes.txt")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/shadow"
    data = tar_of([regular("sanbox.toml"), link], {"sanbox.toml": SPEC.encode()})
    with pytest.raises(ContextError, match="not a regular file"):
        unpack(data)


def test_unpack_bounds_the_number_of_files() -> None:
    members = [regular("sanbox.toml")] + [regular(f"f{i}") for i in range(MAX_FILES + 1)]
    with pytest.raises(ContextError, match="more than"):
        unpack(tar_of(members, {"sanbox.toml": SPEC.encode()}))


def test_unpack_needs_the_spec_and_its_files() -> None:
    with pytest.raises(ContextError, match="no sanbox.toml"):
        unpack(tar_of([regular("notes.txt")]))
    with pytest.raises(ContextError, match="does not hold"):
        unpack(tar_of([regular("sanbox.toml")], {"sanbox.toml": SPEC.encode()}))
    with pytest.raises(ContextError, match="not a tar"):
        unpack(b"garbage" * 100)
    with pytest.raises(SpecError, match="sanbox.toml:2"):
        unpack(tar_of([regular("sanbox.toml")], {"sanbox.toml": b"\nsteps = 3\n"}))


def test_keys_change_from_the_changed_step_on() -> None:
    files = {"notes.txt": b"hello"}
    ctx = unpack(
        tar_of(
            [regular("sanbox.toml"), regular("notes.txt")], {"sanbox.toml": SPEC.encode(), **files}
        )
    )
    keys = step_keys("org_a", "image:b1", ctx.spec, ctx.files)
    assert len(keys) == 3 and len(set(keys)) == 3
    assert step_keys("org_a", "image:b1", ctx.spec, ctx.files) == keys
    changed = {"sanbox.toml": SPEC.replace("one", "two").encode(), **files}
    changed_run = unpack(tar_of([regular("sanbox.toml"), regular("notes.txt")], changed))
    again = step_keys("org_a", "image:b1", changed_run.spec, changed_run.files)
    assert again[0] == keys[0] and again[1:] != keys[1:]
    other_file = step_keys("org_a", "image:b1", ctx.spec, {"notes.txt": b"bye"})
    assert other_file[0] != keys[0]
    assert not set(step_keys("org_b", "image:b1", ctx.spec, ctx.files)) & set(keys)
    assert not set(step_keys("org_a", "image:b2", ctx.spec, ctx.files)) & set(keys)


def spec_copying(src: str) -> str:
    return f'name = "t"\n[[steps]]\ncopy = "{src}"\nto = "/srv/x"\n'


def test_pack_reads_a_nested_file_inside_the_folder(tmp_path: Path) -> None:
    (tmp_path / "sanbox.toml").write_text(spec_copying("conf/app/x.ini"))
    (tmp_path / "conf" / "app").mkdir(parents=True)
    (tmp_path / "conf" / "app" / "x.ini").write_text("[x]")
    data, _ = pack(tmp_path)
    assert unpack(data).files == {"conf/app/x.ini": b"[x]"}


@pytest.mark.parametrize("kind", ["file symlink", "directory symlink", "inner symlink", "fifo"])
def test_pack_refuses_what_is_not_a_regular_file_inside_the_folder(
    tmp_path: Path, kind: str
) -> None:
    folder = tmp_path / "spec"
    folder.mkdir()
    if kind == "file symlink":
        src = "x"
        (folder / "x").symlink_to("/etc/passwd")
    elif kind == "directory symlink":
        src = "etc/passwd"
        (folder / "etc").symlink_to("/etc")
    elif kind == "inner symlink":  # a link that stays inside the folder is refused too
        src = "b"
        (folder / "a").write_text("fine")
        (folder / "b").symlink_to(folder / "a")
    else:
        src = "pipe"
        os.mkfifo(folder / "pipe")
    (folder / "sanbox.toml").write_text(spec_copying(src))
    with pytest.raises(ContextError, match="not a regular file inside the folder"):
        pack(folder)


def test_pack_refuses_a_spec_that_is_a_symlink_out_of_its_folder(tmp_path: Path) -> None:
    (tmp_path / "outside.toml").write_text(SPEC)
    (tmp_path / "spec").mkdir()
    (tmp_path / "spec" / "sanbox.toml").symlink_to(tmp_path / "outside.toml")
    with pytest.raises(ContextError, match="not a regular file inside the folder"):
        pack(tmp_path / "spec")


@pytest.mark.parametrize("src", ["../x", "/etc/passwd", "a/../../x", "a/./../../x", ""])
def test_read_inside_refuses_paths_that_climb_or_are_absolute(tmp_path: Path, src: str) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "x").write_text("outside")
    with pytest.raises(ContextError, match="not a relative path"):
        read_inside(tmp_path / "a", src)
