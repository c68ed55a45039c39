"""Where a rank sends to each peer: ipc to a peer on its own host, tcp to the others."""

from playground.rendezvous.join import Peers, pick_endpoints


def test_same_host_peers_get_their_ipc_endpoint_the_others_tcp():
    peers = Peers(
        endpoints=["tcp://10.77.0.1:1", "tcp://10.77.0.1:2", "tcp://10.77.0.2:3"],
        local_endpoints=["ipc:///r0", "ipc:///r1", ""],
        hosts=["h0", "h0", "h1"],
    )
    assert pick_endpoints(peers, 0) == ["ipc:///r0", "ipc:///r1", "tcp://10.77.0.2:3"]
    assert pick_endpoints(peers, 2) == ["tcp://10.77.0.1:1", "tcp://10.77.0.1:2", "tcp://10.77.0.2:3"]


def test_a_table_without_hosts_keeps_every_endpoint():
    peers = Peers.from_table({"endpoints": ["ipc:///a", "ipc:///b"]})
    assert pick_endpoints(peers, 1) == ["ipc:///a", "ipc:///b"]
