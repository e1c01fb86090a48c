"""Boot to agent answering: median of 5 boots of the base image (disk cloned beforehand), plus the
disk clone itself. Usage: python benchmarks/boot.py [N]"""

from __future__ import annotations

import asyncio
import secrets
import sys
import time

from _common import data_dir, image, summary

from sanbox.host.disk import DiskManager
from sanbox.host.runtime import HostRuntime, MachineSpec


async def main(n: int) -> None:
    dd = data_dir()
    img = image(dd)
    rt = HostRuntime(dd)
    hv = await rt.hypervisor(img)
    print(f"hypervisor {hv.isolation}, image {img.build_id}, {n} boots, 512 MiB, 1 vCPU")
    clones: list[float] = []
    boots: list[float] = []
    for _ in range(n):
        cid = "bench" + secrets.token_hex(4)
        cdir = dd.computer(cid)
        cdir.root.mkdir(parents=True)
        try:
            t0 = time.perf_counter()
            disk = DiskManager(dd).create(img.rootfs, cdir)
            clones.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            machine = await rt.start(MachineSpec(computer_id=cid), img)
            await machine.agent.ping()
            boots.append(time.perf_counter() - t0)
            await machine.agent.close()
        finally:
            await rt.destroy(cid)
    print(summary(f"disk clone ({disk.method})", clones))
    print(summary("boot to agent answering", boots, "s"))


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 5))
