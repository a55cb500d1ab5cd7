#!/bin/sh
# The WireGuard tunnel on the device, run over SSH in make test-image's boot 3 (packaging/test-image.sh): a
# hub in a network namespace of the guest (a veth to the device's side, the kernel's WireGuard, its private key
# in /run/hub.key), the device configured by the card's wireguard.conf, whose Endpoint is the hub's veth
# address. Reports IMAGE-TEST tunnel-* lines: the backend edgelet chose, a handshake, the node API answering on
# the tunnel address from the hub, TunnelReady, then the same across `systemctl restart edgelet` (the same
# interface), and with wireguard_backend = "wireguard-go" the same daemon adopted across a restart.
set -u
say() { echo "IMAGE-TEST tunnel-$*"; }
ifindex() { cat /sys/class/net/wireguard/ifindex 2>/dev/null || echo none; }
# The node API from the hub, through the tunnel: any HTTP answer (401 without credentials) is the node API.
nodeapi() {
    i=0
    while [ $i -lt 30 ]; do
        ip netns exec wghub python3 - <<'EOF' 2>/dev/null && return 0
import socket, ssl
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
with socket.create_connection(("10.99.0.7", 10250), timeout=10) as raw, ctx.wrap_socket(raw) as s:
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n")
    print(s.recv(200).split(b"\r\n")[0].decode())
EOF
        sleep 2
        i=$((i + 1))
    done
    echo "no answer"
}
handshake() {  # the hub's newest handshake with the device, in seconds since the epoch (0: none)
    ip netns exec wghub wg show wghub latest-handshakes | awk '{print $2}'
}
restarted() {  # systemctl restart edgelet, then wait until its tunnel task logged the interface up again
    since="$(date '+%Y-%m-%d %H:%M:%S')"
    systemctl restart edgelet
    i=0
    while [ $i -lt 120 ]; do
        journalctl -u edgelet --since "$since" -o cat | grep "Tunnel up" && return 0
        sleep 2
        i=$((i + 1))
    done
    echo "no Tunnel up line"
}

# The hub.
ip netns add wghub
ip link add wgup type veth peer name wgup-hub
ip link set wgup-hub netns wghub
ip addr add 10.201.0.2/24 dev wgup
ip link set wgup up
ip -n wghub addr add 10.201.0.1/24 dev wgup-hub
ip -n wghub link set wgup-hub up
ip -n wghub link set lo up
ip -n wghub link add wghub type wireguard
device="$(edgelet tunnel peer-line | sed -n 's/^PublicKey = //p')"
ip netns exec wghub wg set wghub private-key /run/hub.key listen-port 51820 peer "$device" allowed-ips 10.99.0.7/32
ip -n wghub addr add 10.99.0.1/24 dev wghub
ip -n wghub link set wghub up

# The kernel's WireGuard, as edgelet chose it at boot.
say "kind: $(ip -d -o link show wireguard | grep -o 'wireguard *addrgenmode\|tun ' | head -n 1)"
say "wireguard-go: $(pgrep -c -x wireguard-go)"
say "log: $(journalctl -u edgelet -o cat | grep 'Tunnel up' | tail -n 1)"
# The device dials out first, as behind NAT: the hub learns its endpoint from that handshake. Its own tries
# at boot stop 90 s after the interface came up (WireGuard's REKEY_ATTEMPT_TIME, no keepalive configured), and
# under emulation the hub can come later than that (seen once: no handshake, then one a minute later).
ping -c 3 -W 5 10.99.0.1 > /dev/null || true
ip netns exec wghub ping -c 3 -W 5 10.99.0.7 > /dev/null  # traffic from the hub: the device answers
say "handshake: $(handshake)"
say "nodeapi: $(nodeapi)"
say "node: $(edgelet node 2>&1 | grep -E '^ *TunnelReady')"
before="$(ifindex)"
rx="$(ip netns exec wghub wg show wghub transfer | awk '{print $2}')"
say "restart: $(restarted)"
after="$(ifindex)"
[ "$before" = "$after" ] && say "ifindex: same $after" || say "ifindex: changed $before $after"
ip netns exec wghub ping -c 3 -W 5 10.99.0.7 > /dev/null
rx2="$(ip netns exec wghub wg show wghub transfer | awk '{print $2}')"
[ "$rx2" -gt "$rx" ] && say "traffic: grew $rx $rx2" || say "traffic: stalled $rx $rx2"
say "nodeapi-after: $(nodeapi)"

# wireguard-go, chosen by the setting for a new interface: the kernel's link removed, the agent restarted.
sed -i '1i wireguard_backend = "wireguard-go"' /etc/edgelet/config.toml
ip link delete dev wireguard
say "go-restart: $(restarted)"
pid="$(pgrep -x wireguard-go)"
say "go-pid: $pid $(ip -d -o link show wireguard | grep -o 'tun ' | head -n 1)"
say "go-restart-2: $(restarted)"
say "go-pid-after: $(pgrep -x wireguard-go | tr '\n' ' ')"
ip netns exec wghub ping -c 3 -W 5 10.99.0.7 > /dev/null
say "go-nodeapi: $(nodeapi)"
say "done"
