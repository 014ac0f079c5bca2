# Simulated hosts on this machine, for tests and benchmarks that stand for
# several machines.  Source it (bash), then:
#
#   rig_up N [RATE]     makes hosts 1..N: each a network namespace, a mount
#                       namespace with a private tmpfs on /dev/shm, its own
#                       hostname (rig-h1 ...) and an /etc/hosts naming every
#                       host; all joined by a bridge (a switch namespace of
#                       their own) on 10.0.0.0/24, host I at 10.0.0.I (so
#                       the addresses the README and the tutorial print are
#                       rig hosts), with a default route as a real host has.
#                       RATE ("100mbit") limits each host's link both ways
#                       with tc tbf.  Returns 77 with a sentence when
#                       this machine cannot make them (not root, no ip,
#                       unshare or nsenter).
#   rig_on I CMD...     runs CMD on host I in the foreground, in the current
#                       directory, with the caller's environment.
#   rig_bg I LOG CMD... runs it in the background, output to LOG; the pid
#                       is in $rig_pid, and rig_down kills what is left.
#   rig_addr I          prints host I's address.
#   rig_etcd I          starts an etcd on host I (client port 2379) and
#                       waits until it answers; prints its URL.  Its pid
#                       is in $rig_pid: call it in this shell, not in
#                       $(...), whose record of it rig_down never sees.
#   rig_down            kills what rig_bg started, the hosts' holders, and
#                       deletes the namespaces (rig_up traps EXIT to it).
#
# A namespace alone is not a host: processes in two network namespaces
# still share /dev/shm, so shared memory "works" between them.  Here each
# host is held by one process (a sleep) that owns its mount and UTS
# namespaces inside its network namespace; commands enter all three with
# nsenter.  Needs root.  The state lives in $rig_dir.

rig_name=ferry-rig-$$
rig_dir=
rig_holders=()
rig_jobs=()

rig_skip() {
	echo "SKIP: simulated hosts: $*"
	return 77
}

rig_up() {
	local n=$1 rate=${2:-} i t ns addr hosts cmd holder
	[ "$(id -u)" -eq 0 ] || { rig_skip "needs root (network and mount namespaces)"; return; }
	for cmd in ip unshare nsenter mount; do
		command -v "$cmd" >/dev/null || { rig_skip "needs $cmd"; return; }
	done
	ip netns add "$rig_name-sw" 2>/dev/null ||
		{ rig_skip "'ip netns add' fails here (no network namespaces)"; return; }
	rig_dir=$(mktemp -d "${TMPDIR:-/tmp}/$rig_name.XXXXXX")
	trap rig_down EXIT
	ip -n "$rig_name-sw" link add br0 type bridge
	ip -n "$rig_name-sw" link set br0 up
	hosts="127.0.0.1 localhost"
	for ((i = 1; i <= n; i++)); do
		hosts+=$'\n'"$(rig_addr "$i") rig-h$i"
	done
	printf '%s\n' "$hosts" >"$rig_dir/hosts"
	for ((i = 1; i <= n; i++)); do
		ns=$rig_name-h$i
		addr=$(rig_addr "$i")
		ip netns add "$ns"
		ip -n "$rig_name-sw" link add "p$i" type veth peer name eth0 netns "$ns"
		ip -n "$rig_name-sw" link set "p$i" master br0 up
		ip -n "$ns" addr add "$addr/24" dev eth0
		ip -n "$ns" link set eth0 up
		ip -n "$ns" link set lo up
		# Like a real host's; the bridge leads nowhere else.
		ip -n "$ns" route add default dev eth0
		if [ -n "$rate" ]; then
			# Upload and download: the host's end and the switch's.  The
			# burst covers the rate over a timer tick; latency bounds the
			# queue.
			tc -n "$ns" qdisc add dev eth0 root tbf rate "$rate" burst 1mb latency 50ms &&
				tc -n "$rig_name-sw" qdisc add dev "p$i" root tbf rate "$rate" burst 1mb latency 50ms ||
				{ rig_skip "tc cannot add a tbf qdisc here"; return; }
		fi
		# The holder: a private /dev/shm, hostname and /etc/hosts, then
		# a sleep that keeps the namespaces alive.  unshare execs in place
		# (no --fork), so the pid ip netns exec leaves is the holder's.
		ip netns exec "$ns" unshare -mu --propagation private sh -c '
			mount -t tmpfs -o size=1g,mode=1777 tmpfs /dev/shm &&
			mount --bind "$1" /etc/hosts &&
			hostname "$2" && echo up >"$3" && exec sleep 86400' \
			rig "$rig_dir/hosts" "rig-h$i" "$rig_dir/h$i.up" &
		rig_holders+=($!)
		echo $! >"$rig_dir/h$i.pid"
	done
	# Up to 60 s, while the holder runs: on a loaded machine its start
	# (ip netns exec, unshare, two mounts) can take seconds.
	for ((i = 1; i <= n; i++)); do
		holder=$(cat "$rig_dir/h$i.pid")
		for ((t = 0; t < 1200; t++)); do
			[ -f "$rig_dir/h$i.up" ] && break
			kill -0 "$holder" 2>/dev/null || break
			sleep 0.05
		done
		[ -f "$rig_dir/h$i.up" ] || { echo "rig: host $i did not come up"; return 1; }
	done
}

rig_addr() { echo "10.0.0.$1"; }

rig_on() {
	local i=$1
	shift
	nsenter -t "$(cat "$rig_dir/h$i.pid")" -n -m -u --wd="$PWD" -- "$@"
}

rig_bg() {
	local i=$1 log=$2
	shift 2
	# nsenter execs the command, so $! is the command's pid.
	nsenter -t "$(cat "$rig_dir/h$i.pid")" -n -m -u --wd="$PWD" -- "$@" \
		>"$log" 2>&1 &
	rig_pid=$!
	rig_jobs+=("$rig_pid")
}

rig_etcd() {
	local i=$1 addr url t
	addr=$(rig_addr "$i")
	url=http://$addr:2379
	rig_bg "$i" "$rig_dir/etcd-h$i.log" etcd --name "rig-h$i" \
		--data-dir "$rig_dir/etcd-h$i" \
		--listen-client-urls "$url" --advertise-client-urls "$url" \
		--listen-peer-urls "http://$addr:2380" \
		--initial-advertise-peer-urls "http://$addr:2380" \
		--initial-cluster "rig-h$i=http://$addr:2380"
	for ((t = 0; t < 200; t++)); do
		if rig_on "$i" bash -c "exec 3<>/dev/tcp/$addr/2379" 2>/dev/null; then
			echo "$url"
			return 0
		fi
		sleep 0.1
	done
	echo "rig: etcd on host $i did not answer at $url:" >&2
	cat "$rig_dir/etcd-h$i.log" >&2
	return 1
}

rig_down() {
	local p ns
	for p in "${rig_jobs[@]}" "${rig_holders[@]}"; do
		kill "$p" 2>/dev/null
	done
	wait 2>/dev/null
	for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$rig_name-"); do
		ip netns del "$ns"
	done
	[ -n "$rig_dir" ] && rm -rf "$rig_dir"
	rig_jobs=() rig_holders=() rig_dir=
}
