"""playground-netns-rsh, hydra's launcher into emulated hosts: what it says when it cannot go there.
(tests/test_launchers.py runs mpiexec through it across two namespaces.)"""

from tools import have, need

from playground.hosts.netns_rsh import main


def test_usage_and_unknown_host(capsys):
    assert main(["only-a-host"]) == 255
    assert "usage: playground-netns-rsh HOST COMMAND" in capsys.readouterr().err
    need(have("ip"), "`ip` (iproute2) is not installed")
    assert main(["no-such-host-pg", "true"]) == 255
    err = capsys.readouterr().err
    assert "no network namespace is named no-such-host-pg or has the address no-such-host-pg" in err
