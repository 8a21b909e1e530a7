"""The main job (`make demo`): show GPUDirect RDMA working in the test VM.

Builds the demo program, boots the VM once, loads the stand-ins and peermem-rs in both of its modes
(invalidating, then persistent) and runs tests/demo/gdr_demo.c, which registers GPU memory the way
ibv_reg_mr does, moves data through the NIC into GPU memory and back, frees it while registered, and
explains each step. The account is printed on the terminal.
"""

import subprocess
import sys
from pathlib import Path

import vm

REPO = vm.REPO
DEMO = REPO / "tests" / "demo"

PLAN = """\
set -e
M=/payload/modules
echo "GPU stand-in: $(cat /sys/bus/pci/devices/*/uevent 2>/dev/null | grep -c 'PCI_ID=1AF4:1110') ivshmem device(s); NIC stand-in: edu"
insmod $M/nvidia_p2p_standin.ko
# The host of kernels before 6.6 (sysfs=1): the demo shows its memory_peers statistics.
insmod $M/peer_mem_host.ko sysfs=1
insmod $M/peermem_rs.ko persistent_api_support=0
/payload/demo/gdr_demo
rmmod peermem_rs
insmod $M/peermem_rs.ko
/payload/demo/gdr_demo
rmmod peermem_rs
rmmod peer_mem_host
rmmod nvidia_p2p_standin
echo
echo "Kernel log of peermem-rs:"
dmesg | grep -E 'peermem_rs|nv_mem' | sed 's/^/  /' | tail -20
"""


def main(kdir, payload):
    out = Path(payload) / "demo"
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(REPO / "tests/infra/in-root"), "gcc", "-static", "-O2", "-Wall",
                    f"-I{REPO / 'tests/selftests/common'}", f"-I{REPO / 'tests/standins/include'}",
                    str(DEMO / "gdr_demo.c"), "-o", str(out / "gdr_demo")], check=True)
    accel, reason = vm.choose_accel(kdir)
    vm.log(f"booting the demo VM ({accel}: {reason}); under TCG this takes a couple of minutes")
    res = vm.boot("switch", PLAN, payload, Path(payload).parent / "results" / "demo", accel, 1200, kdir)
    output = (res.results / "output").read_text(errors="replace") if (res.results / "output").exists() else ""
    print(output)
    if res.plan_rc != 0:
        print(f"The demo failed (exit {res.plan_rc}); the VM console is in {res.results / 'console.log'}",
              file=sys.stderr)
        return 1
    return 0
