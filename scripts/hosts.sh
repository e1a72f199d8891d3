# Sourced (not run): simulated hosts on one machine, each its own network
# namespace with one veth "wire" to a bridge in a switch namespace, so UCX
# and the store talk TCP between real addresses, as across machines.
# Used by bench/ratelimited (with a rate) and tests/cross_host.
#
#   source scripts/hosts.sh
#   hosts_create PREFIX COUNT SUBNET [RATE]   # hosts PREFIXh0.. at SUBNET.1.. (SUBNET like 10.78.0)
#   hosts_exec I command...                   # run in host I
#   hosts_shape I RATE                        # host I alone behind a link of RATE
#   hosts_address I                           # SUBNET.(I+1)
#   hosts_rank_env R N PORT TOKEN             # chorus::init()'s environment for rank R (or join) of N, a host each
#   hosts_wire_bytes                          # bytes every host's wire has sent so far, summed
#   hosts_cleanup                             # removes them (also on EXIT once created)
# Needs root and iproute2; RATE (e.g. 1gbit) shapes both ends of each wire
# with tc's token bucket, like a NIC of that speed; hosts_shape gives one
# host its own (a rank behind a slower link: run_heterogeneous).

hosts_prefix="" hosts_count=0 hosts_subnet=""

hosts_available() {
  [[ $(id -u) == 0 ]] && command -v ip >/dev/null && ip netns add "chorus-probe-$$" 2>/dev/null &&
    ip netns del "chorus-probe-$$" 2>/dev/null
}

hosts_cleanup() {
  local i
  for ((i = 0; i < hosts_count; i++)); do ip netns del "${hosts_prefix}h$i" 2>/dev/null || true; done
  [[ -n $hosts_prefix ]] && ip netns del "${hosts_prefix}sw" 2>/dev/null || true
}

hosts_create() {
  hosts_prefix="$1" hosts_count="$2" hosts_subnet="$3"
  local rate="${4:-}" switch="${1}sw" i ns
  trap hosts_cleanup EXIT
  ip netns add "$switch"
  ip -n "$switch" link add br0 type bridge
  ip -n "$switch" link set br0 up
  for ((i = 0; i < hosts_count; i++)); do
    ns="${hosts_prefix}h$i"
    ip netns add "$ns"
    ip -n "$ns" link add wire type veth peer name "p$i" netns "$switch"
    ip -n "$ns" addr add "$(hosts_address "$i")/24" dev wire
    ip -n "$ns" link set wire up
    ip -n "$ns" link set lo up
    ip -n "$switch" link set "p$i" master br0
    ip -n "$switch" link set "p$i" up
    if [[ -n $rate ]]; then hosts_shape "$i" "$rate"; fi
  done
}

# Both ends of host I's wire at RATE (replacing what shaped them).
hosts_shape() {
  local i="$1" rate="$2"
  ip netns exec "${hosts_prefix}h$i" tc qdisc replace dev wire root tbf rate "$rate" burst "$(hosts_burst "$rate")" latency 100ms
  ip netns exec "${hosts_prefix}sw" tc qdisc replace dev "p$i" root tbf rate "$rate" burst "$(hosts_burst "$rate")" latency 100ms
}

# The token bucket must hold a timer tick's worth of the rate, else it caps
# below it: 256 KiB is enough to 1 Gbit/s, 10 Gbit/s needs a few MiB.
hosts_burst() {
  case "$1" in
    *gbit) (( ${1%gbit} >= 10 )) && echo 4mb || echo 256kb ;;
    *) echo 256kb ;;
  esac
}

hosts_address() { echo "$hosts_subnet.$(($1 + 1))"; }
# A port for a job's store: below the ephemeral ports (32768 on), which the
# ranks' closing sockets of earlier jobs may still hold in a namespace.
hosts_port() { echo $((20000 + RANDOM % 12000)); }
hosts_name() { echo "${hosts_prefix}h$1"; }
hosts_exec() {
  local i="$1"
  shift
  ip netns exec "${hosts_prefix}h$i" "$@"
}

# What chorus::init() reads for rank R of N with a host per rank (no
# launcher: the store on host 0 at PORT), over TCP on the wire. R `join`:
# a process that joins the running job (CHORUS_JOIN=1, the next free rank).
hosts_rank_env() {
  local r="$1" n="$2" port="$3" token="$4" who
  who="CHORUS_RANK=$r"
  [[ $r == join ]] && who="CHORUS_JOIN=1"
  echo "$who" CHORUS_SIZE="$n" CHORUS_LOCAL_RANK=0 CHORUS_LOCAL_SIZE=1 \
    CHORUS_ADDR="$(hosts_address 0):$port" CHORUS_TOKEN="$token" UCX_TLS=tcp,self UCX_NET_DEVICES=wire \
    UCX_WARN_UNUSED_ENV_VARS=n
}

# The bytes all hosts have sent on their wires (the veths' counters):
# what crossed the network, headers and retransmissions included.
hosts_wire_bytes() {
  local i total=0 sent
  for ((i = 0; i < hosts_count; i++)); do
    sent="$(ip -n "${hosts_prefix}h$i" -s link show wire | awk '/TX:/ { getline; print $1; exit }')"
    total=$((total + sent))
  done
  echo "$total"
}
