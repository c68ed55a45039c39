"""`playground-netns-rsh HOST COMMAND...`: the "rsh" that lets MPICH's mpiexec start ranks on
emulated hosts, which are Linux network namespaces on this machine.

mpiexec (hydra) reaches each host of `-hosts` by running its launcher as
`LAUNCHER HOST "hydra_pmi_proxy" ARGS...` and expects the command to run *on* HOST, as ssh or rsh
would; the proxy then starts that host's ranks. This launcher "logs in" by entering the network
namespace that is HOST: a namespace named HOST (`ip netns list`), or the one that owns the address
HOST. Like ssh it joins the command into one line for `sh -c` (hydra quotes the proxy's name for
that shell). The ranks see `PLAYGROUND_HOST` set to the namespace's name, so they know their host
although every namespace shares this machine's host name.

    HYDRA_LAUNCHER_AUTOFORK=0 ip netns exec H1 mpiexec -launcher rsh -launcher-exec playground-netns-rsh \\
        -hosts 10.78.0.1,10.78.0.2 -ppn 2 -n 4 -genv MASTER_ADDR 10.78.0.1 -genv MASTER_PORT 29500 \\
        python -m playground node ring

mpiexec itself runs in the first host's namespace, so that the proxies reach its control port
over the emulated network. Without HYDRA_LAUNCHER_AUTOFORK=0 hydra would fork the proxy of a host
it thinks is local instead of calling the launcher. Needs root (entering a namespace) and `ip`.
"""

import os
import subprocess
import sys

IP_TIMEOUT_S = 10.0


def _ip(*args: str) -> str:
    return subprocess.run(
        ["ip", *args], capture_output=True, text=True, check=True, timeout=IP_TIMEOUT_S
    ).stdout


def namespaces() -> list[str]:
    """The named network namespaces (`ip netns list` prints "name" or "name (id: N)")."""
    return [line.split()[0] for line in _ip("netns", "list").splitlines() if line.strip()]


def namespace_of(host: str) -> str | None:
    """The namespace named `host`, else the one with `host` among its IPv4 addresses, else None."""
    names = namespaces()
    if host in names:
        return host
    for name in names:
        if f" {host}/" in _ip("-n", name, "-o", "-4", "addr", "show"):
            return name
    return None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2:
        print("usage: playground-netns-rsh HOST COMMAND [ARG...]", file=sys.stderr)
        return 255
    host, command = args[0], args[1:]
    try:
        name = namespace_of(host)
    except (OSError, subprocess.SubprocessError) as e:
        print(f"playground-netns-rsh: cannot list network namespaces with `ip`: {e}", file=sys.stderr)
        return 255
    if name is None:
        print(
            f"playground-netns-rsh: no network namespace is named {host} or has the address {host} "
            f"(see `ip netns list`)",
            file=sys.stderr,
        )
        return 255
    os.environ["PLAYGROUND_HOST"] = name
    os.execvp("ip", ["ip", "netns", "exec", name, "sh", "-c", " ".join(command)])
    return 255  # not reached


if __name__ == "__main__":
    sys.exit(main())
