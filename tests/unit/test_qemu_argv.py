from pathlib import Path

import pytest

from sanbox.host.drivers import NetAttachment, VmSpec, VmUser
from sanbox.host.drivers.confine import FIRST_VM_UID, VM_UIDS, computer_uid
from sanbox.host.drivers.qemu.argv import (
    AGENT_PORT_NAME,
    kernel_cmdline,
    launcher_argv,
    qemu_argv,
)
from sanbox.host.settings import HostSettings, SettingsError

pytestmark = pytest.mark.unit


def spec(**kw: object) -> VmSpec:
    base: dict[str, object] = dict(
        name="cmp_a",
        kernel=Path("/img/vmlinuz"),
        initrd=Path("/img/initrd.img"),
        disk=Path("/d/computers/cmp_a/disk.raw"),
        run_dir=Path("/d/computers/cmp_a/run"),
        console_log=Path("/d/computers/cmp_a/logs/console.log"),
        vcpus=1,
        memory_mib=768,
        hostname="demo",
    )
    base.update(kw)
    return VmSpec(**base)  # type: ignore[arg-type]


def test_tcg_pins_tsc_and_uses_cpu_max() -> None:
    argv = qemu_argv(spec(), "tcg", 2445.4)
    assert argv[argv.index("-accel") + 1] == "tcg,tb-size=256"  # a bounded code cache
    assert argv[argv.index("-cpu") + 1] == "max"
    cmdline = argv[argv.index("-append") + 1].split()
    assert "tsc_early_khz=2445400" in cmdline
    assert "tsc=reliable" in cmdline  # never refined-jiffies, a 4 ms clock, for a late tick


def test_kvm_uses_host_cpu_and_no_tsc_pin() -> None:
    argv = qemu_argv(spec(), "kvm", 2445.4)
    assert argv[argv.index("-cpu") + 1] == "host"
    assert "tsc_early_khz" not in argv[argv.index("-append") + 1]
    assert "tsc=reliable" not in argv[argv.index("-append") + 1]  # KVM has kvm-clock


def test_address_randomization_is_kept_unless_the_host_trades_it_under_tcg() -> None:
    def cmdline(accel: str, **over: object) -> list[str]:
        argv = qemu_argv(spec(**over), accel, 2000.0)
        return argv[argv.index("-append") + 1].split()

    assert "norandmaps" not in cmdline("tcg")
    assert "norandmaps" in cmdline("tcg", tcg_aslr=False)  # SANBOX_TCG_ASLR=off
    assert "norandmaps" not in cmdline("kvm", tcg_aslr=False)  # never a KVM guest's


def test_the_tcg_address_randomization_is_a_setting() -> None:
    assert HostSettings.from_env({}).tcg_aslr
    assert not HostSettings.from_env({"SANBOX_TCG_ASLR": "OFF"}).tcg_aslr
    with pytest.raises(SettingsError, match="SANBOX_TCG_ASLR='no' is not one of on, off"):
        HostSettings.from_env({"SANBOX_TCG_ASLR": "no"})


def test_microvm_devices_control_port_and_detach() -> None:
    argv = qemu_argv(spec(), "tcg", 2000.0)
    joined = " ".join(argv)
    assert argv[argv.index("-M") + 1].startswith("microvm")
    assert f"virtserialport,chardev=agent,name={AGENT_PORT_NAME}" in joined
    assert "path=/d/computers/cmp_a/run/agent.sock,server=on,wait=off" in joined
    assert "virtio-rng-device" in argv
    assert "-daemonize" not in argv  # the sandbox forbids QEMU's fork: the launcher detaches it
    assert argv[argv.index("-pidfile") + 1] == "/d/computers/cmp_a/run/vm.pid"
    assert argv[argv.index("-m") + 1] == "768"
    assert "-netdev" not in argv and "-incoming" not in argv


def test_tap_in_netns_and_incoming_state() -> None:
    net = NetAttachment(
        tap="tap0",
        mac="52:54:00:00:00:02",
        guest_cidr="10.0.0.2/30",
        gateway="10.0.0.1",
        dns="10.0.0.1",
        netns="sb-cmp_a",
    )
    argv = qemu_argv(
        spec(net=net, memory_file=Path("/dev/shm/sb.ram"), restore=True), "tcg", 2000.0
    )
    assert argv[:4] == ["ip", "netns", "exec", "sb-cmp_a"]
    assert "tap,id=net0,ifname=tap0,script=no,downscript=no" in argv
    assert argv[argv.index("-incoming") + 1] == "defer"
    assert argv[argv.index("-M") + 1] == "microvm,rtc=on,memory-backend=ram"
    assert "memory-backend-file,id=ram,size=768M,mem-path=/dev/shm/sb.ram,share=on" in argv
    cmdline = kernel_cmdline(spec(net=net), "tcg", 2000.0)
    assert "sanbox.ip=10.0.0.2/30 sanbox.gw=10.0.0.1 sanbox.dns=10.0.0.1" in cmdline
    assert "sanbox.hostname=demo" in cmdline


def test_a_resume_maps_the_saved_memory_privately() -> None:
    """Saved memory is mapped copy-on-write: the guest's writes never reach the saved file."""
    saved = Path("/d/computers/cmp_a/run/memory.mapped")
    argv = qemu_argv(spec(memory_file=saved, memory_private=True, restore=True), "tcg", 2000.0)
    backend = f"memory-backend-file,id=ram,size=768M,mem-path={saved},share=off"
    assert backend in argv and "share=on" not in " ".join(argv)
    assert argv[argv.index("-incoming") + 1] == "defer"


@pytest.mark.parametrize(("name", "fmt"), [("disk.qcow2", "qcow2"), ("disk.raw", "raw")])
def test_the_disk_format_follows_the_file(name: str, fmt: str) -> None:
    argv = qemu_argv(spec(disk=Path("/d/computers/cmp_a") / name), "tcg", 2445.4)
    assert f"format={fmt}," in argv[argv.index("-drive") + 1]


def test_a_guest_gets_seccomp_with_every_group_denied() -> None:
    argv = qemu_argv(spec(), "tcg", 2000.0)
    assert argv[argv.index("-sandbox") + 1] == (
        "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"
    )


def test_a_full_disk_stops_the_guest_instead_of_reaching_it() -> None:
    drive = qemu_argv(spec(), "tcg", 2000.0)
    assert "werror=stop,rerror=stop" in drive[drive.index("-drive") + 1]


def test_qemu_never_starts_as_root_it_drops_first_inside_the_namespace() -> None:
    net = NetAttachment(
        tap="tap0",
        mac="52:54:00:00:00:02",
        guest_cidr="10.0.0.2/30",
        gateway="10.0.0.1",
        netns="sb-cmp_a",
    )
    user = VmUser("sanbox-vm", 999, 995, (104,))
    argv = qemu_argv(spec(net=net, run_as=user), "kvm", 2000.0, "/usr/bin/qemu-system-x86_64")
    assert argv[:4] == ["ip", "netns", "exec", "sb-cmp_a"]  # the namespace needs root: first
    drop = argv[4 : argv.index("/usr/bin/qemu-system-x86_64")]
    assert drop[0] == "setpriv"
    assert {"--reuid=999", "--regid=995", "--groups=104", "--bounding-set=-all"} <= set(drop)
    assert "-runas" not in argv  # QEMU's own drop needs setuid, which its sandbox forbids
    no_groups = qemu_argv(spec(run_as=VmUser("sanbox-vm", 999, 995)), "tcg", 2000.0)
    assert "--clear-groups" in no_groups


def test_the_launcher_joins_the_cgroups_before_qemu_runs() -> None:
    procs = (Path("/sys/fs/cgroup/sanbox.slice/ab12cd-cmp_a/cgroup.procs"),)
    argv = launcher_argv(["qemu", "-m", "512"], procs, Path("/d/logs/hypervisor.log"))
    assert argv[:2] == ["sh", "-c"] and argv[3:] == ["sanbox-launch", "qemu", "-m", "512"]
    script = argv[2]
    join = script.index("echo $$ > /sys/fs/cgroup/sanbox.slice/ab12cd-cmp_a/cgroup.procs")
    assert join < script.index('"$@"')  # the shell joins first, so QEMU starts inside
    # and makes it the OOM killer's choice before the control plane (kept across exec)
    oom = script.index("echo 500 > /proc/self/oom_score_adj || exit 1")
    assert oom < script.index('"$@"')
    assert '"$@" </dev/null >/d/logs/hypervisor.log 2>&1 &' in script
    assert script.rstrip().endswith("echo $!")


def test_each_computer_gets_a_uid_of_its_own_from_the_vm_range() -> None:
    a = computer_uid("ab12cd-cmp_a", set())
    assert a == computer_uid("ab12cd-cmp_a", set())  # stable
    assert FIRST_VM_UID <= a < FIRST_VM_UID + VM_UIDS  # never root, never a login user's
    assert computer_uid("ab12cd-cmp_a", {a}) != a  # another computer holds it: the next one
    taken = {computer_uid(f"ab12cd-cmp_{i}", set()) for i in range(50)}
    assert len(taken) > 45  # spread over the range


def test_the_tcg_code_cache_is_bounded_and_counted_in_the_cgroup() -> None:
    """Unbounded (1 GiB by default in QEMU 7.2), TCG's code cache grew past `memory.max` and the
    kernel OOM-killed QEMU mid-transfer; it is bounded and its size added to the limit."""
    from sanbox.host.drivers.cgroup import limits_for
    from sanbox.host.drivers.qemu import QemuHypervisor
    from sanbox.host.drivers.qemu.argv import TCG_CODE_CACHE_MIB

    assert QemuHypervisor("tcg").capabilities.memory_overhead_mib == TCG_CODE_CACHE_MIB
    assert QemuHypervisor("kvm").capabilities.memory_overhead_mib == 0
    kvm = qemu_argv(spec(), "kvm", 2445.4)
    assert kvm[kvm.index("-accel") + 1] == "kvm"
    base = limits_for(1, 512).memory_bytes
    assert limits_for(1, 512, TCG_CODE_CACHE_MIB).memory_bytes == base + (TCG_CODE_CACHE_MIB << 20)


def test_a_host_agent_gives_its_vms_uids_of_its_own_range_only() -> None:
    from sanbox.host.drivers.confine import UidRange

    mine = UidRange.parse(f"{FIRST_VM_UID + 1000}-{FIRST_VM_UID + 1009}")
    assert (mine.first, mine.count, mine.last) == (FIRST_VM_UID + 1000, 10, FIRST_VM_UID + 1009)
    taken: set[int] = set()
    for i in range(10):
        uid = computer_uid(f"ab12cd-cmp_{i}", taken, mine)
        assert uid in mine and uid not in taken
        taken.add(uid)
    with pytest.raises(Exception, match="all 10 VM uids"):
        computer_uid("ab12cd-cmp_x", taken, mine)
    bad = ["1-2", f"{FIRST_VM_UID}", f"{FIRST_VM_UID + 5}-{FIRST_VM_UID + 4}"]
    for text in [*bad, f"{FIRST_VM_UID}-{FIRST_VM_UID + VM_UIDS}"]:
        with pytest.raises(ValueError):
            UidRange.parse(text)
