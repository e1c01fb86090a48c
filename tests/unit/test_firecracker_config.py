"""The Firecracker driver's pure parts: the guest command line (the same `sanbox.*` arguments as
QEMU's), the configuration's refusals (qcow2, vCPUs, memory files), the jailer's argv and the
jail's files (real files: the disk is hard-linked, never copied)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from sanbox.host.drivers import NetAttachment, VmSpec, VmUser
from sanbox.host.drivers.firecracker.config import (
    AGENT_VSOCK_PORT,
    FirecrackerPaths,
    check_disk,
    disk_format,
    kernel_cmdline,
    vm_config,
)
from sanbox.host.drivers.firecracker.driver import direct_argv, launcher_argv
from sanbox.host.drivers.firecracker.errors import FirecrackerConfigError
from sanbox.host.drivers.firecracker.jail import (
    JailerSettings,
    jail_root,
    jailed_paths,
    jailer_argv,
    on_host,
    parent_cgroup,
    populate,
    vm_id,
)
from sanbox.host.drivers.qemu.argv import kernel_cmdline as qemu_kernel_cmdline

pytestmark = pytest.mark.unit

NET = NetAttachment("tap3", "06:00:0a:00:00:02", "10.0.0.2/30", "10.0.0.1", "10.0.0.1", "sbx-c1")
USER = VmUser("sanbox-vm", 990, 990)
SETTINGS = JailerSettings(Path("/usr/bin/jailer"), Path("/usr/bin/firecracker"), Path("/srv/j"))


def a_spec(tmp: Path, **changes: object) -> VmSpec:
    fields: dict[str, object] = {
        "name": "c1",
        "kernel": tmp / "vmlinux",
        "initrd": tmp / "initrd",
        "disk": tmp / "disk.raw",
        "run_dir": tmp / "run",
        "console_log": tmp / "logs" / "console.log",
        "hostname": "box",
        "net": NET,
        "extra_cmdline": ("sanbox.extra=1",),
    }
    fields.update(changes)
    return VmSpec(**fields)  # type: ignore[arg-type]


def test_the_guest_gets_the_same_sanbox_arguments_as_under_qemu(tmp_path: Path) -> None:
    spec = a_spec(tmp_path)
    ours = kernel_cmdline(spec).split()
    qemus = qemu_kernel_cmdline(spec, "kvm", 2000.0).split()
    assert [a for a in ours if a.startswith("sanbox.") and not a.startswith("sanbox.agent")] == [
        a for a in qemus if a.startswith("sanbox.")
    ]
    assert f"sanbox.agent=vsock:{AGENT_VSOCK_PORT}" in ours
    assert {"console=ttyS0", "reboot=k", "pci=off", "init=/sbin/sanbox-init"} <= set(ours)
    assert not any(a.startswith("root=") for a in ours)  # Firecracker adds root=/dev/vda itself


def test_the_config_names_the_spec_s_files_and_devices(tmp_path: Path) -> None:
    spec = a_spec(tmp_path)
    paths = FirecrackerPaths.direct(spec)
    config = vm_config(spec, paths)
    assert config["boot-source"]["kernel_image_path"] == str(spec.kernel)
    assert config["boot-source"]["initrd_path"] == str(spec.initrd)
    assert config["boot-source"]["boot_args"] == kernel_cmdline(spec)
    (drive,) = config["drives"]
    assert drive["path_on_host"] == str(spec.disk) and drive["is_root_device"] is True
    assert config["machine-config"]["vcpu_count"] == 1
    assert config["machine-config"]["mem_size_mib"] == 512
    assert config["network-interfaces"] == [
        {"iface_id": "net0", "host_dev_name": "tap3", "guest_mac": "06:00:0a:00:00:02"}
    ]
    assert config["vsock"] == {"guest_cid": 3, "uds_path": str(spec.run_dir / "agent.sock")}
    assert paths.vsock == spec.agent_socket
    assert vm_config(a_spec(tmp_path, net=None), paths)["network-interfaces"] == []


def test_only_raw_disks(tmp_path: Path) -> None:
    assert disk_format(b"QFI\xfb\x00\x00\x00\x03") == "qcow2"
    assert disk_format(b"\x00" * 8) == "raw"
    raw, qcow = tmp_path / "disk.raw", tmp_path / "disk.qcow2"
    raw.write_bytes(b"\x00" * 4096)
    qcow.write_bytes(b"QFI\xfb" + b"\x00" * 4092)
    check_disk(raw)
    with pytest.raises(FirecrackerConfigError, match="qcow2: Firecracker attaches raw disks only"):
        check_disk(qcow)
    with pytest.raises(FirecrackerConfigError, match="cannot be read"):
        check_disk(tmp_path / "absent.raw")


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"vcpus": 0}, "1 to 32 vCPUs"),
        ({"vcpus": 33}, "1 to 32 vCPUs"),
        ({"memory_mib": 0}, "at least 1 MiB"),
        ({"memory_file": Path("/dev/shm/ram")}, "anonymous memory"),
        ({"memory_file": Path("/s/m"), "restore": True, "memory_readonly": True}, "read-only"),
    ],
)
def test_what_firecracker_cannot_run_is_refused(
    tmp_path: Path, changes: dict[str, object], words: str
) -> None:
    spec = a_spec(tmp_path, **changes)
    with pytest.raises(FirecrackerConfigError, match=words):
        vm_config(spec, FirecrackerPaths.direct(spec))


def test_the_jailer_argv(tmp_path: Path) -> None:
    cgroup = Path("/sys/fs/cgroup/sanbox/c1")
    spec = a_spec(
        tmp_path, cgroup_procs=(Path("/sys/fs/cgroup/sanbox/cgroup.procs"), cgroup / "cgroup.procs")
    )
    assert jailer_argv(spec, SETTINGS, USER) == [
        "/usr/bin/jailer",
        "--id",
        "sanbox-c1",
        "--exec-file",
        "/usr/bin/firecracker",
        "--uid",
        "990",
        "--gid",
        "990",
        "--chroot-base-dir",
        "/srv/j",
        "--resource-limit",
        "no-file=2048",
        "--netns",
        "/var/run/netns/sbx-c1",
        "--cgroup-version",
        "2",
        "--parent-cgroup",
        "sanbox/c1",
        "--",
        "--api-sock",
        "/api.sock",
        "--config-file",
        "/firecracker.json",
    ]
    restore = jailer_argv(a_spec(tmp_path, restore=True, net=None), SETTINGS, USER)
    assert restore[-3:] == ["--", "--api-sock", "/api.sock"]  # a snapshot loads into it
    assert "--netns" not in restore and "--parent-cgroup" not in restore


def test_the_jailer_refuses_root_and_bad_ids(tmp_path: Path) -> None:
    with pytest.raises(FirecrackerConfigError, match="unprivileged"):
        jailer_argv(a_spec(tmp_path), SETTINGS, VmUser("root", 0, 0))
    for name in ("c_1", "c/1", "x" * 60):
        with pytest.raises(FirecrackerConfigError, match="not a Firecracker VM id"):
            vm_id(a_spec(tmp_path, name=name))
    with pytest.raises(FirecrackerConfigError, match="not a cgroup"):
        parent_cgroup((Path("/tmp/x/cgroup.procs"),), Path("/sys/fs/cgroup"))


def test_paths_inside_the_jail() -> None:
    root = jail_root(SETTINGS, "sanbox-c1")
    assert root == Path("/srv/j/firecracker/sanbox-c1/root")
    inside = jailed_paths()
    assert on_host(root, inside.api_socket) == root / "api.sock"
    assert all(p.is_absolute() and p.parent == Path("/") for p in inside.__dict__.values())


def test_direct_and_launcher_argv(tmp_path: Path) -> None:
    spec = a_spec(tmp_path)
    paths = FirecrackerPaths.direct(spec)
    argv = direct_argv(spec, Path("/opt/firecracker"), paths)
    assert argv == [
        "ip",
        "netns",
        "exec",
        "sbx-c1",
        "/opt/firecracker",
        "--id",
        "sanbox-c1",
        "--api-sock",
        str(spec.run_dir / "firecracker.sock"),
        "--config-file",
        str(spec.run_dir / "firecracker.json"),
    ]
    launcher = launcher_argv(argv, (Path("/sys/fs/cgroup/a b/cgroup.procs"),), spec)
    assert launcher[:2] == ["sh", "-c"] and launcher[3:] == ["sanbox-launch", *argv]
    assert "echo $$ > '/sys/fs/cgroup/a b/cgroup.procs' || exit 1" in launcher[2]
    assert f">>{spec.console_log} 2>{spec.hypervisor_log} &" in launcher[2]
    assert "echo 500 > /proc/self/oom_score_adj || exit 1" in launcher[2]


def test_the_jail_holds_links_to_the_spec_s_files(tmp_path: Path) -> None:
    spec = a_spec(tmp_path)
    for f, data in ((spec.kernel, b"ELF"), (spec.initrd, b"cpio"), (spec.disk, b"\0" * 512)):
        f.write_bytes(data)
    root = tmp_path / "jail" / "root"
    me = VmUser("me", os.getuid(), os.getgid())
    populate(spec, root, me, b"{}")
    inside = jailed_paths()
    disk = on_host(root, inside.disk)
    assert os.stat(disk).st_ino == os.stat(spec.disk).st_ino  # the same file: writes land in it
    assert on_host(root, inside.kernel).read_bytes() == b"ELF"
    assert on_host(root, inside.config).read_bytes() == b"{}"
    log = on_host(root, inside.log)
    assert log.is_file() and (log.stat().st_mode & 0o777) == 0o600
    populate(spec, root, me, None)  # again (a restart): links replaced, nothing left over
    assert os.stat(disk).st_ino == os.stat(spec.disk).st_ino


def test_a_disk_on_another_filesystem_is_refused_not_copied(tmp_path: Path) -> None:
    if os.stat("/dev/shm").st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("/dev/shm is on the same filesystem as the test's tmp dir")
    spec = a_spec(tmp_path)
    for f in (spec.kernel, spec.initrd, spec.disk):
        f.write_bytes(b"x")
    root = Path(f"/dev/shm/sanbox-test-jail-{os.getpid()}")
    try:
        with pytest.raises(FirecrackerConfigError, match="must be on the data dir's filesystem"):
            populate(spec, root, VmUser("me", os.getuid(), os.getgid()), None)
        assert on_host(root, jailed_paths().kernel).read_bytes() == b"x"  # small: copied
    finally:
        shutil.rmtree(root, ignore_errors=True)
