#!/bin/sh
# A lab at rest costs nothing (make bench): a k = 4 fat tree with 1 ms of
# delay on every link, brought up by `fabric up` and left alone; the
# agent's CPU (its delay loop, and everything else it runs) over 10 s, in
# percent of one core, with the hypervisor's share meanwhile. Target:
# <= 1 %. FABRIC=path picks the binary (default bin/fabric), so an older
# build can be measured the same way.
set -eu
cd "$(dirname "$0")/.."
fabric=${FABRIC:-bin/fabric}
[ "$(id -u)" = 0 ] || { echo "idle lab: needs root, skipped"; exit 0; }
dir=$(mktemp -d)
trap '"$fabric" down bidle >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
cat > "$dir/idle.yaml" <<'LAB'
name: bidle
topology: {kind: fattree, k: 4}
links: {rate: 100Mbit, delay: 1ms}
LAB
"$fabric" up "$dir/idle.yaml" >/dev/null
# agent.json (holder.json in labs of older builds) names the agent
state=/run/fabric/bidle/agent.json
[ -e "$state" ] || state=/run/fabric/bidle/holder.json
pid=$(sed -n 's/.*"pid":\([0-9]*\).*/\1/p' "$state")
sleep 1 # the lab's own start-up traffic passes
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
steal() { awk '/^cpu / {print $9, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat; }
t0=$(ticks "$pid"); s0=$(steal)
sleep 10
t1=$(ticks "$pid"); s1=$(steal)
echo "$t0 $t1 $s0 $s1" | awk '{
	used = ($2 - $1) / 100 / 10 * 100
	steal = ($5 - $3) / ($6 - $4) * 100
	printf "idle k=4 fat tree, 1 ms on every link: the agent used %.1f %% of a core over 10 s (target <= 1 %%); steal %.1f %%\n", used, steal
	exit (used > 1)
}'
