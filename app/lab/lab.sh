#!/usr/bin/env bash
# lab.sh - the `recovery lab` development/CI Slurm cluster: a REAL Slurm on this one machine,
# without systemd: munged -> [slurmdbd] -> slurmctld -> N emulated slurmd (node1..nodeN, each
# its own NodeHostname, port on 127.0.0.1 and host name in a UTS namespace) -> [slurmrestd with JWT].
#
# Which Slurm: the host's packages (Debian 12: 22.05), or a newer release run from a Debian root
# built once with debootstrap (24.11 = Debian 13 trixie, 26.05 = Debian testing forky) and
# cached in RECOVERY_LAB_ROOTS. Daemons and the client commands run inside that root (chroot);
# /proc, /dev and the lab directory are bind-mounted into it, the lab directory at the SAME path,
# so the paths Slurm reports (job output, working directories) are the paths the host reads.
# <lab>/bin holds wrappers (squeue, scontrol, sacct, sinfo, sbatch, scancel, srun, sacctmgr)
# for RECOVERY_SLURM_BIN_DIR, in either mode.
#
# Usage: lab.sh up|down|status|build  (run as root: apt, debootstrap, chroot, mounts)
#        build = only build (or find) the Debian root of RECOVERY_LAB_SLURM, start nothing
# Environment:
#   RECOVERY_LAB_DIR=/tmp/recovery-lab   state, spool, logs, pid files, the generated config, bin/
#   RECOVERY_LAB_SLURM=host              host | 22.05 | 24.11 | 26.05 (a version the host's own
#                                        Debian release ships runs from the host's packages)
#   RECOVERY_LAB_ROOTS=/var/cache/recovery-lab/roots   where the Debian roots are built and reused
#   RECOVERY_LAB_MIRROR=                 Debian mirror for debootstrap (default: the host's apt sources)
#   RECOVERY_LAB_PORT_OFFSET=0           added to every port (the version adds its own: 24.11 +100,
#                                        26.05 +200), so several labs can run at once
#   RECOVERY_LAB_NODES=3                 emulated compute nodes (1..9)
#   RECOVERY_LAB_DBD=0                   1 = also run slurmdbd, storing into the MariaDB already
#                                        listening on RECOVERY_LAB_DB_HOST:RECOVERY_LAB_DB_PORT
#                                        (root, empty password) in database RECOVERY_LAB_DB_NAME
#   RECOVERY_LAB_DB_HOST=127.0.0.1  RECOVERY_LAB_DB_PORT=3306
#   RECOVERY_LAB_DB_NAME=slurm_acct_db_<cluster>[_p<offset>]
#   RECOVERY_LAB_RESTD=0                 1 = also run slurmrestd (auth/jwt) on 127.0.0.1:6820+offsets
#   RECOVERY_LAB_INSTALL=1               0 = never call apt-get (fail when packages are missing)
#   RECOVERY_LAB_TIMEOUT=120             seconds to wait for each daemon and the nodes
#   RECOVERY_LAB_EXTRA_CONF=""           extra slurm.conf lines
#   RECOVERY_LAB_TIMINGS=fast            fast: a requeued job may start 5 s later (cred_expire=5), the
#                                        schedulers run every 2 s/1 s; default: Slurm's own defaults
#                                        (cred_expire 120 s, requeue_delay 120 s on 25.11+, sched_interval=60,
#                                        bf_interval=30), the timings sites run with
# stdout carries only eval-able `export ...` lines (up) or the status report (status);
# progress goes to stderr. Every daemon we start has its pid in $DIR/run/*.pid, and `down`
# signals only those pids after checking /proc/PID/exe, never by process name; it unmounts
# only the bind mounts this lab made.
set -euo pipefail

ACTION=${1:-}
DIR=${RECOVERY_LAB_DIR:-/tmp/recovery-lab}
DIR=${DIR%/}
NODES=${RECOVERY_LAB_NODES:-3}
DBD=${RECOVERY_LAB_DBD:-0}
RESTD=${RECOVERY_LAB_RESTD:-0}
WANT=${RECOVERY_LAB_SLURM:-host}
ROOTS=${RECOVERY_LAB_ROOTS:-/var/cache/recovery-lab/roots}
PORT_OFFSET=${RECOVERY_LAB_PORT_OFFSET:-0}
DB_HOST=${RECOVERY_LAB_DB_HOST:-127.0.0.1}
DB_PORT=${RECOVERY_LAB_DB_PORT:-3306}
INSTALL=${RECOVERY_LAB_INSTALL:-1}
TIMEOUT=${RECOVERY_LAB_TIMEOUT:-120}
TIMINGS=${RECOVERY_LAB_TIMINGS:-fast}
CONF=$DIR/etc/slurm.conf
RUN=$DIR/run
LOG=$DIR/log
LABENV=$DIR/etc/lab.env
CLIENTS="squeue scontrol sacct sinfo sbatch scancel srun sacctmgr"
export SLURM_CONF=$CONF

log() { echo "[recovery lab $(date +%T)] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# ---------------------------------------------------------------- which Slurm
# version -> Debian suite that ships it; the per-version port shift lets labs of different
# versions run side by side with the default offset
suite_of() {
  case $1 in
    22.05) echo bookworm ;;
    24.11) echo trixie ;;
    26.05) echo forky ;;
    *) return 1 ;;
  esac
}
# the release has SchedulerParameters=requeue_delay and expedited requeue (25.11+: here 26.05)
has_requeue_delay() { [ "$VERSION" = 26.05 ]; }
version_shift() { case $1 in 24.11) echo 100 ;; 26.05) echo 200 ;; *) echo 0 ;; esac; }
host_codename() { (. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-unknown}") || echo unknown; }

# Sets MODE (host|root), VERSION (major.minor or "host"), SUITE, ROOT, the ports and names.
resolve_version() {
  local want=$1 suite
  if [ "$want" = host ]; then
    MODE=host VERSION=host SUITE=$(host_codename) ROOT=""
  else
    suite=$(suite_of "$want") || die "unknown Slurm version '$want' (known: 22.05, 24.11, 26.05, host)"
    VERSION=$want SUITE=$suite
    if [ "$suite" = "$(host_codename)" ]; then MODE=host ROOT=""; else MODE=root ROOT=$ROOTS/$suite; fi
  fi
  case $PORT_OFFSET in '' | *[!0-9]*) die "RECOVERY_LAB_PORT_OFFSET must be a number" ;; esac
  local off=$(( $(version_shift "$VERSION") + PORT_OFFSET ))
  OFFSET=$off
  CTLD_PORT=$((6817 + off)) SLURMD_PORT=$((6818 + off)) DBD_PORT=$((6819 + off)) RESTD_PORT=$((6820 + off))
  NODE_PORT_BASE=$((17000 + off))
  if [ "$MODE" = host ]; then CLUSTER=lab; else CLUSTER=lab${VERSION//./}; fi
  local suffix=""
  [ "$PORT_OFFSET" = 0 ] || suffix=_p$PORT_OFFSET
  DB_NAME=${RECOVERY_LAB_DB_NAME:-slurm_acct_db_$CLUSTER$suffix}
  MUNGE_DIR=$DIR/munge
}

# load what `up` recorded (down/status act on the lab that runs, whatever the caller asks)
load_labenv() {
  [ -f "$LABENV" ] || return 1
  # shellcheck disable=SC1090
  . "$LABENV"
  PORT_OFFSET=$LAB_PORT_OFFSET DBD=$LAB_DBD RESTD=$LAB_RESTD TIMINGS=${LAB_TIMINGS:-fast}
  RECOVERY_LAB_DB_NAME=$LAB_DB_NAME ROOTS=$LAB_ROOTS
  resolve_version "$LAB_VERSION"
}

# R CMD... -> run a Slurm/munge command of this lab's version (inside the root, or on the host)
R() {
  if [ "$MODE" = root ]; then chroot "$ROOT" "$@"; else "$@"; fi
}
# Rt SECONDS CMD... -> the same, bounded by timeout(1)
Rt() {
  local t=$1; shift
  if [ "$MODE" = root ]; then timeout "$t" chroot "$ROOT" "$@"; else timeout "$t" "$@"; fi
}

# the absolute host path of /usr/sbin/PROG's real executable (Debian installs slurmctld/slurmd as
# alternatives: /usr/sbin/slurmctld -> /etc/alternatives/... -> slurmctld-wlm), as /proc/PID/exe shows it
exe_path() {
  if [ "$MODE" = root ]; then
    echo "$ROOT$(chroot "$ROOT" readlink -f "/usr/sbin/$1" 2>/dev/null)"
  else
    readlink -f "/usr/sbin/$1"
  fi
}

# pid_of PIDFILE PROGRAM -> prints the pid when the file names a live process whose executable
# is PROGRAM (guards against pid reuse after a reboot or a crash)
pid_of() {
  local pf=$1 prog=$2 pid
  [ -s "$pf" ] || return 1
  pid=$(tr -dc 0-9 < "$pf")
  [ -n "$pid" ] && [ -d "/proc/$pid" ] || return 1
  [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$(exe_path "$prog")" ] || return 1
  echo "$pid"
}
alive() { pid_of "$@" >/dev/null; }
wait_for() { # wait_for SECONDS WHAT CMD... (polls every 0.1 s; on timeout shows the newest daemon log lines)
  local deadline=$(( $(date +%s) + $1 )) what=$2 f; shift 2
  until "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      for f in "$LOG"/slurmctld.log "$LOG"/slurmdbd.log "$LOG"/slurmrestd.log; do
        [ -s "$f" ] && { echo "--- last lines of $f" >&2; tail -n 15 "$f" >&2; }
      done
      die "timeout waiting for $what after $(( $(date +%s) - deadline + $1 )) s (logs: $LOG)"
    fi
    sleep 0.1
  done
}

# ---------------------------------------------------------------- packages and the Debian root
install_packages() { # install_packages PKG... (host packages, when missing)
  local missing="" p made_policy=0
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
  done
  [ -z "$missing" ] && return 0
  [ "$INSTALL" = 1 ] || die "missing packages:$missing (RECOVERY_LAB_INSTALL=0)"
  command -v apt-get >/dev/null || die "missing packages:$missing and no apt-get"
  log "installing:$missing"
  # maintainer scripts must not start daemons; create policy-rc.d only if absent, remove only ours
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && made_policy=1
  fi
  local rc=0
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing >&2 ||
    { log "install failed; apt-get update and retry"
      apt-get update >&2 &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing >&2; } || rc=$?
  [ $made_policy = 1 ] && rm -f /usr/sbin/policy-rc.d
  [ $rc = 0 ] || die "apt-get install failed:$missing"
}

host_packages() {
  if [ "$MODE" = host ]; then
    local pkgs="munge slurmctld slurmd slurm-client"
    [ "$DBD" = 1 ] && pkgs="$pkgs slurmdbd slurm-wlm-mysql-plugin mariadb-client"
    [ "$RESTD" = 1 ] && pkgs="$pkgs slurmrestd slurm-wlm-jwt-plugin curl"
    # shellcheck disable=SC2086
    install_packages $pkgs
  else
    local pkgs="debootstrap"
    [ "$DBD" = 1 ] && pkgs="$pkgs mariadb-client"
    [ "$RESTD" = 1 ] && pkgs="$pkgs curl"
    # shellcheck disable=SC2086
    install_packages $pkgs
  fi
}

mirror() {
  local m=${RECOVERY_LAB_MIRROR:-}
  [ -n "$m" ] || m=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  [ -n "$m" ] || m=$(awk '$1 == "deb" && $2 !~ /^\[/ {print $2; exit} $1 == "deb" && $2 ~ /^\[/ {print $3; exit}' \
    /etc/apt/sources.list 2>/dev/null || true)
  echo "${m:-http://deb.debian.org/debian}"
}

# Build the Debian root of $SUITE once (debootstrap into a temporary dir, then rename), under a
# lock so that two labs starting at once build it once; later labs reuse it (~0 s).
ROOT_PKGS="munge,slurmctld,slurmd,slurm-client,slurmdbd,slurm-wlm-mysql-plugin,slurmrestd,slurm-wlm-jwt-plugin"
build_root() {
  local stamp=$ROOT/.recovery-lab-root tmp script="" rc started
  if [ -e "$stamp" ]; then
    # a testing suite moves on: a root built later may hold another release than the one asked for
    grep -q "^slurm-wlm $VERSION\." "$stamp" ||
      die "$ROOT holds $(cat "$stamp"), not Slurm $VERSION (Debian $SUITE moved on?); remove it to rebuild"
    return 0
  fi
  mkdir -p "$ROOTS"
  exec 9>"$ROOTS/.$SUITE.lock"
  log "waiting for the build lock of the $SUITE root"
  flock 9
  if [ -e "$stamp" ]; then exec 9>&-; return 0; fi
  tmp=$ROOTS/.$SUITE.building
  if [ -d "$tmp" ]; then
    awk -v t="$tmp/" 'index($2, t) == 1 {exit 1}' /proc/self/mounts || die "$tmp has mounts; unmount them first"
    rm -rf "$tmp"
  fi
  # debootstrap knows the released suites; a newer testing suite bootstraps like sid
  [ -e "/usr/share/debootstrap/scripts/$SUITE" ] || script=/usr/share/debootstrap/scripts/sid
  started=$(date +%s)
  log "building the Debian $SUITE root for Slurm $VERSION in $ROOT (once; about a minute): debootstrap from $(mirror)"
  set +e
  debootstrap --variant=minbase --include="$ROOT_PKGS" "$SUITE" "$tmp" "$(mirror)" $script 2>&1 |
    grep --line-buffered -vE '^I: (Retrieving|Validating|Extracting|Unpacking|Configuring) ' |
    while IFS= read -r line; do log "debootstrap: $line"; done
  rc=${PIPESTATUS[0]}
  set -e
  [ "$rc" = 0 ] || die "debootstrap of $SUITE failed (rc $rc); see $tmp/debootstrap/debootstrap.log"
  # nothing inside may start daemons on its own; the host's name resolution for localhost
  printf '#!/bin/sh\nexit 101\n' > "$tmp/usr/sbin/policy-rc.d" && chmod 755 "$tmp/usr/sbin/policy-rc.d"
  [ -e "$tmp/etc/hosts" ] || cp /etc/hosts "$tmp/etc/hosts"
  chroot "$tmp" slurmctld -V > "$tmp/.recovery-lab-root.new"
  grep -q "^slurm-wlm $VERSION\." "$tmp/.recovery-lab-root.new" ||
    die "Debian $SUITE now ships $(cat "$tmp/.recovery-lab-root.new"), not Slurm $VERSION (left in $tmp)"
  mv "$tmp/.recovery-lab-root.new" "$tmp/.recovery-lab-root"
  mv "$tmp" "$ROOT"
  log "root ready: $(cat "$stamp") in $(( $(date +%s) - started )) s, $(du -sh "$ROOT" | cut -f1)"
  exec 9>&-
}

is_mounted() { awk -v m="$1" '$2 == m {found=1} END {exit !found}' /proc/self/mounts; }

mount_root() {
  is_mounted "$ROOT/proc" || mount -t proc proc "$ROOT/proc"
  is_mounted "$ROOT/dev" || mount --bind /dev "$ROOT/dev"
  mkdir -p "$ROOT$DIR"
  is_mounted "$ROOT$DIR" || mount --bind "$DIR" "$ROOT$DIR"
  # the host's /etc/hosts names this machine (slurmctld and slurmd resolve it)
  cmp -s /etc/hosts "$ROOT/etc/hosts" || cp /etc/hosts "$ROOT/etc/hosts"
}

# unmount this lab's view of the lab dir; /proc and /dev only when no other lab uses the root
umount_root() {
  [ "$MODE" = root ] && [ -d "$ROOT" ] || return 0
  if is_mounted "$ROOT$DIR"; then log "unmounting $ROOT$DIR"; umount "$ROOT$DIR" || umount -l "$ROOT$DIR"; fi
  if awk -v r="$ROOT/" -v p="$ROOT/proc" -v d="$ROOT/dev" \
      'index($2, r) == 1 && $2 != p && $2 != d {exit 1}' /proc/self/mounts; then
    is_mounted "$ROOT/dev" && { umount "$ROOT/dev" || umount -l "$ROOT/dev"; }
    is_mounted "$ROOT/proc" && { umount "$ROOT/proc" || umount -l "$ROOT/proc"; }
  else
    log "leaving $ROOT/proc and $ROOT/dev mounted: another lab uses this root"
  fi
  return 0
}

# ---------------------------------------------------------------- up
write_config() {
  local acct nodelines="" i new authinfo authalt="" dbd_authinfo=""
  if [ "$DBD" = 1 ]; then
    acct="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$DBD_PORT
AccountingStoreFlags=job_comment"
    # connections to slurmdbd take the munge socket from here, not from AuthInfo
    [ "$MODE" = root ] && acct="$acct
AccountingStoragePass=$MUNGE_DIR/munge.socket.2"
  else
    acct="AccountingStorageType=accounting_storage/none"
  fi
  # in a root, munged is the lab's own (its socket in the lab dir); on the host, the usual one
  # Slurm's defaults (cred_expire 120, no SchedulerParameters) or the lab's fast ones; the release's own
  # requeue_delay (25.11+; it defaults to cred_expire) is named so that `status` and the config say it
  local sched ctldparams=""
  if [ "$TIMINGS" = default ]; then
    authinfo="cred_expire=120"
    sched="bf_interval=30,sched_interval=60"
    has_requeue_delay && sched="$sched,requeue_delay=120"
  else
    authinfo="cred_expire=5"
    sched="bf_interval=1,sched_interval=2"
  fi
  # 25.11+: a job submitted with --requeue=expedite is requeued at once (no delay, top priority) on a node failure
  has_requeue_delay && ctldparams="
SlurmctldParameters=enable_expedited_requeue"
  if [ "$MODE" = root ]; then
    authinfo="$authinfo,socket=$MUNGE_DIR/munge.socket.2"
    dbd_authinfo="
AuthInfo=socket=$MUNGE_DIR/munge.socket.2"
  fi
  if [ "$RESTD" = 1 ]; then
    authalt="
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$DIR/etc/jwt_hs256.key"
  fi
  # the host's lab keeps exactly the configuration it always had (a changed file restarts the daemons)
  local origin=""
  [ "$MODE" = root ] && origin="
# Slurm $VERSION from the Debian $SUITE root $ROOT"
  for i in $(seq 1 "$NODES"); do
    nodelines+="NodeName=node$i NodeHostname=node$i NodeAddr=127.0.0.1 Port=$((NODE_PORT_BASE + i)) CPUs=2 State=UNKNOWN"$'\n'
  done
  new=$(cat <<EOF
# generated by recovery lab (app/lab/lab.sh); rewritten by every "recovery lab up"$origin
ClusterName=$CLUSTER
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
AuthType=auth/munge
CredType=cred/munge
# a requeued/released job may start cred_expire s later (default 120; 5 is the minimum accepted;
# 25.11+ requeue_delay, which defaults to it)
AuthInfo=$authinfo$authalt
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd-%n.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
# no cgroups or systemd here
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
$acct
# one record per attempt even without slurmdbd (sacct -c)
JobCompType=jobcomp/filetxt
JobCompLoc=$LOG/jobcomp.txt
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
# Slurm's defaults (bf_interval=30, sched_interval=60) delay a released job by up to a minute (--timings)
SchedulerParameters=$sched$ctldparams
MpiDefault=none
SwitchType=switch/none
MailProg=/bin/true
ReturnToService=2
JobRequeue=1
# finished jobs stay in squeue --json for a day (22.05 turns MinJobAge=0 into 2 s)
MinJobAge=86400
KillWait=5
InactiveLimit=0
SlurmdTimeout=300
SlurmdParameters=config_overrides
$nodelines
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
${RECOVERY_LAB_EXTRA_CONF:-}
EOF
)
  mkdir -p "$DIR/etc" "$DIR/state" "$DIR/spool" "$DIR/bin" "$RUN" "$LOG"
  chmod 0755 "$DIR" "$DIR/etc"
  CONFIG_CHANGED=0
  if [ ! -f "$CONF" ] || [ "$(cat "$CONF")" != "$new" ]; then
    [ -f "$CONF" ] && CONFIG_CHANGED=1
    printf '%s\n' "$new" > "$CONF"
    chmod 0644 "$CONF"
  fi
  if [ "$MODE" = root ]; then
    # 23.x+ slurmd initialises a cgroup plugin even with proctrack/linuxproc and task/none, and
    # there is no cgroup filesystem in the root: say that none is wanted (22.05 has no such value)
    printf '# generated by recovery lab\nCgroupPlugin=disabled\n' > "$DIR/etc/cgroup.conf"
  else
    rm -f "$DIR/etc/cgroup.conf"
  fi
  if [ "$RESTD" = 1 ] && [ ! -s "$DIR/etc/jwt_hs256.key" ]; then
    (umask 077 && dd if=/dev/urandom of="$DIR/etc/jwt_hs256.key" bs=32 count=1 status=none)
  fi
  if [ "$DBD" = 1 ]; then
    cat > "$DIR/etc/slurmdbd.conf.new" <<EOF
AuthType=auth/munge$dbd_authinfo$authalt
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=root
LogFile=$LOG/slurmdbd.log
PidFile=$RUN/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=$DB_HOST
StoragePort=$DB_PORT
StorageUser=root
StorageLoc=$DB_NAME
EOF
    chmod 600 "$DIR/etc/slurmdbd.conf.new"
    mv "$DIR/etc/slurmdbd.conf.new" "$DIR/etc/slurmdbd.conf"
  fi
}

write_wrappers() {
  local tool target
  for tool in $CLIENTS; do
    target=$DIR/bin/$tool
    if [ "$MODE" = root ]; then
      cat > "$target.new" <<EOF
#!/bin/sh
# generated by recovery lab: Slurm $VERSION's $tool from the Debian $SUITE root $ROOT (needs root)
SLURM_CONF=$CONF; export SLURM_CONF
exec chroot $ROOT /bin/sh -c 'cd "\$1" 2>/dev/null || cd /; shift; exec "\$@"' $tool "\$PWD" /usr/bin/$tool "\$@"
EOF
    else
      cat > "$target.new" <<EOF
#!/bin/sh
# generated by recovery lab: the host's $tool, pointed at this lab
SLURM_CONF=$CONF; export SLURM_CONF
exec /usr/bin/$tool "\$@"
EOF
    fi
    chmod 0755 "$target.new"
    mv "$target.new" "$target"
  done
}

record_labenv() {
  cat > "$LABENV.new" <<EOF
LAB_VERSION=$VERSION
LAB_PORT_OFFSET=$PORT_OFFSET
LAB_DBD=$DBD
LAB_RESTD=$RESTD
LAB_DB_NAME=$DB_NAME
LAB_ROOTS=$ROOTS
LAB_TIMINGS=$TIMINGS
EOF
  mv "$LABENV.new" "$LABENV"
}

start_munge() {
  if [ "$MODE" = root ]; then
    local uid
    uid=$(chroot "$ROOT" id -u munge)
    mkdir -p "$MUNGE_DIR"
    [ -s "$MUNGE_DIR/munge.key" ] || chroot "$ROOT" mungekey --create --keyfile="$MUNGE_DIR/munge.key"
    chown -R "$uid:$uid" "$MUNGE_DIR"
    chmod 0755 "$MUNGE_DIR"
    chmod 0400 "$MUNGE_DIR/munge.key"
    alive "$RUN/munged.pid" munged && return 0
    log "starting munged (the lab's own, socket $MUNGE_DIR/munge.socket.2)"
    rm -f "$MUNGE_DIR/munged.pid" "$MUNGE_DIR/munge.socket.2.lock"
    chroot --userspec="$uid:$uid" "$ROOT" /usr/sbin/munged --force --socket="$MUNGE_DIR/munge.socket.2" \
      --key-file="$MUNGE_DIR/munge.key" --pid-file="$MUNGE_DIR/munged.pid" \
      --log-file="$MUNGE_DIR/munged.log" --seed-file="$MUNGE_DIR/munged.seed"
    wait_for 10 "munged pid file" test -s "$MUNGE_DIR/munged.pid"
    cp "$MUNGE_DIR/munged.pid" "$RUN/munged.pid"
    wait_for 10 munge sh -c "chroot '$ROOT' munge -S '$MUNGE_DIR/munge.socket.2' -n | chroot '$ROOT' unmunge -S '$MUNGE_DIR/munge.socket.2'"
    return 0
  fi
  mkdir -p /run/munge /var/log/munge /var/lib/munge /etc/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge /etc/munge
  chmod 0755 /run/munge
  chmod 0700 /etc/munge /var/lib/munge /var/log/munge
  [ -s /etc/munge/munge.key ] || mungekey --create --keyfile=/etc/munge/munge.key
  chown munge:munge /etc/munge/munge.key
  chmod 0400 /etc/munge/munge.key
  alive "$RUN/munged.pid" munged && return 0
  if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    log "munged already running (not ours): reusing it"
    return 0
  fi
  log "starting munged"
  rm -f /run/munge/munged.pid
  runuser -u munge -- /usr/sbin/munged --force --pid-file=/run/munge/munged.pid
  wait_for 10 "munged pid file" test -s /run/munge/munged.pid
  cp /run/munge/munged.pid "$RUN/munged.pid"
  wait_for 10 munge sh -c 'munge -n | unmunge'
}

port_free_or_ours() { # port_free_or_ours PORT PIDFILE PROGRAM
  alive "$2" "$3" && return 0
  if ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; then
    die "port $1 is taken by another process; pick another RECOVERY_LAB_PORT_OFFSET (--port-offset)"
  fi
}

start_dbd() {
  [ "$DBD" = 1 ] || return 0
  mariadb -h "$DB_HOST" -P "$DB_PORT" -uroot -e 'select 1' >/dev/null 2>&1 ||
    die "no MariaDB answering on $DB_HOST:$DB_PORT as root without password (needed by --dbd)"
  mariadb -h "$DB_HOST" -P "$DB_PORT" -uroot -e "CREATE DATABASE IF NOT EXISTS \`$DB_NAME\`"
  port_free_or_ours "$DBD_PORT" "$RUN/slurmdbd.pid" slurmdbd
  if ! alive "$RUN/slurmdbd.pid" slurmdbd; then
    log "starting slurmdbd (database $DB_NAME on $DB_HOST:$DB_PORT)"
    R /usr/sbin/slurmdbd   # daemonizes; reads slurmdbd.conf next to $SLURM_CONF
  fi
  wait_for "$TIMEOUT" slurmdbd R sacctmgr -n list cluster
  if ! R sacctmgr -n -P list cluster format=cluster | grep -qx "$CLUSTER"; then
    R sacctmgr -i add cluster "$CLUSTER" >/dev/null
    # a lab that ran without slurmdbd saved a cluster id of its own; slurmctld now takes the
    # database's (else "CLUSTER ID MISMATCH" and it exits)
    rm -f "$DIR/state/clustername"
  fi
}

start_slurm() {
  local i
  if alive "$RUN/slurmctld.pid" slurmctld; then
    [ "$CONFIG_CHANGED" = 0 ] || { log "configuration changed: restarting slurmctld and slurmd"; stop_slurm_daemons; }
  fi
  port_free_or_ours "$CTLD_PORT" "$RUN/slurmctld.pid" slurmctld
  if ! alive "$RUN/slurmctld.pid" slurmctld; then
    log "starting slurmctld (port $CTLD_PORT)"
    R /usr/sbin/slurmctld   # daemonizes, writes SlurmctldPidFile
  fi
  wait_for "$TIMEOUT" slurmctld R scontrol ping
  for i in $(seq 1 "$NODES"); do
    mkdir -p "$DIR/spool/node$i"
    if ! alive "$RUN/slurmd-node$i.pid" slurmd; then
      log "starting slurmd node$i (port $((NODE_PORT_BASE + i)))"
      start_slurmd "node$i"
    fi
  done
}

# start_slurmd NODE -> one emulated node's slurmd, when unshare(1) can make them, in UTS and mount namespaces
# of its own: its host name is NODE and its /etc/hosts (every lab node on a loopback address of its own,
# 127.0.10.N, then this machine's) resolves the others. What runs there (job steps; torchrun's `host :` and rendezvous address, NCCL's
# `host:pid:tid`) sees its node's name, as on a real cluster, not this machine's name on every node.
start_slurmd() {
  local node=$1 hosts=$DIR/etc/hosts.nodes i
  if command -v unshare >/dev/null && unshare --uts --mount true 2>/dev/null; then
    # a loopback address of its own per node, so that a reverse lookup (Python's getfqdn) gives the node's name
    { for i in $(seq 1 "$NODES"); do echo "127.0.10.$i node$i"; done; cat /etc/hosts; } > "$hosts.new"
    mv "$hosts.new" "$hosts"
    local target=/etc/hosts
    [ "$MODE" = root ] && target=$ROOT/etc/hosts
    # shellcheck disable=SC2016 # expanded by the inner shell
    unshare --uts --mount --propagation private sh -c \
      'hostname "$1" && mount --bind "$2" "$3" && if [ -n "$4" ]; then exec chroot "$4" /usr/sbin/slurmd -N "$1"; else exec /usr/sbin/slurmd -N "$1"; fi' \
      sh "$node" "$hosts" "$target" "$ROOT"
  else
    R /usr/sbin/slurmd -N "$node"
  fi
}

restd_answers() { # any HTTP answer (401 without a token) means it listens
  local code
  code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$RESTD_PORT/openapi/v3" 2>/dev/null) || true
  [ -n "$code" ] && [ "$code" != 000 ]
}

start_restd() {
  # a lab brought up without --restd runs none; a changed slurm.conf needs a fresh one
  if [ "$RESTD" != 1 ] || [ "$CONFIG_CHANGED" = 1 ]; then stop_pids "slurmrestd:$RUN/slurmrestd.pid"; fi
  [ "$RESTD" = 1 ] || return 0
  port_free_or_ours "$RESTD_PORT" "$RUN/slurmrestd.pid" slurmrestd
  # the accounting endpoints load only with slurmdbd ("Failure loading plugin path bindings" otherwise)
  local plugins=openapi/slurmctld
  [ "$DBD" = 1 ] && plugins=openapi/slurmctld,openapi/slurmdbd
  [ "$MODE" = host ] && plugins=openapi/v0.0.38 && [ "$DBD" = 1 ] && plugins=openapi/v0.0.38,openapi/dbv0.0.38
  # numeric ids: 26.05's slurmrestd fails to resolve "nobody" by name inside the root
  local uid gid
  uid=$(R id -u nobody) gid=$(R id -g nobody)
  if ! alive "$RUN/slurmrestd.pid" slurmrestd; then
    log "starting slurmrestd on 127.0.0.1:$RESTD_PORT (auth/jwt)"
    # slurmrestd refuses to run as root or SlurmUser and has no daemon mode: setsid, as nobody
    if [ "$MODE" = root ]; then
      setsid nohup chroot "$ROOT" env SLURM_CONF="$CONF" SLURM_JWT=daemon /usr/sbin/slurmrestd \
        -a rest_auth/jwt -s "$plugins" -u "$uid" -g "$gid" "127.0.0.1:$RESTD_PORT" >> "$LOG/slurmrestd.log" 2>&1 < /dev/null &
    else
      setsid nohup env SLURM_CONF="$CONF" SLURM_JWT=daemon /usr/sbin/slurmrestd \
        -a rest_auth/jwt -s "$plugins" -u "$uid" -g "$gid" "127.0.0.1:$RESTD_PORT" >> "$LOG/slurmrestd.log" 2>&1 < /dev/null &
    fi
    echo $! > "$RUN/slurmrestd.pid"
  fi
  wait_for "$TIMEOUT" "slurmrestd on port $RESTD_PORT" restd_answers
}

nodes_ready() { # every configured node registered and usable; resume drained ones left by tests
  local st
  st=$(R sinfo -h -N -o '%N %t' 2>/dev/null) || return 1
  printf '%s\n' "$st" | awk '$2 ~ /^drain|^drng/ {print $1}' | while read -r n; do
    R scontrol update nodename="$n" state=resume >/dev/null 2>&1 || true
  done
  [ "$(printf '%s\n' "$st" | grep -cE ' (idle|mix|alloc)$')" = "$NODES" ]
}

do_up() {
  [ "$(id -u)" = 0 ] || die "must run as root (apt-get, debootstrap, chroot, /run/munge); try sudo -E"
  case $NODES in [1-9]) ;; *) die "RECOVERY_LAB_NODES must be 1..9" ;; esac
  case $TIMINGS in fast | default) ;; *) die "RECOVERY_LAB_TIMINGS must be fast or default" ;; esac
  resolve_version "$WANT"
  if [ -f "$LABENV" ]; then
    local prev
    prev=$(sed -n 's/^LAB_VERSION=//p' "$LABENV")
    if [ -n "$prev" ] && [ "$prev" != "$VERSION" ]; then
      ( load_labenv && alive "$RUN/slurmctld.pid" slurmctld ) &&
        die "$DIR runs Slurm $prev; run \`recovery lab down\` first or use another lab dir"
      log "lab dir held Slurm $prev: clearing its job state for $VERSION"
      rm -rf "$DIR/state" "$DIR/spool"
    fi
  fi
  host_packages
  mkdir -p "$DIR"
  if [ "$MODE" = root ]; then
    build_root
    mount_root
  fi
  write_config
  write_wrappers
  record_labenv
  start_munge
  start_dbd
  start_slurm
  wait_for "$TIMEOUT" "nodes idle" nodes_ready
  start_restd
  log "ready: $(R sinfo -V) (${ROOT:-host packages}): $(R sinfo -h -o '%P %a %D %t %N' | tr '\n' ' ')"
  echo "export SLURM_CONF=$CONF"
  echo "export RECOVERY_LAB_DIR=$DIR"
  echo "export RECOVERY_SLURM_BIN_DIR=$DIR/bin"
  if [ "$RESTD" = 1 ]; then
    local token
    token=$(R scontrol token lifespan=86400 username=root | sed -n 's/^SLURM_JWT=//p')
    [ -n "$token" ] || die "scontrol token gave no token (AuthAltTypes=auth/jwt; see $LOG/slurmctld.log)"
    (umask 077 && printf '%s\n' "$token" > "$DIR/etc/jwt.token")
    echo "export SLURMRESTD_URL=http://127.0.0.1:$RESTD_PORT"
    echo "export RECOVERY_SLURMRESTD_URL=http://127.0.0.1:$RESTD_PORT"
    echo "export SLURM_JWT=$token"
    echo "export RECOVERY_LAB_JWT_TOKEN_FILE=$DIR/etc/jwt.token"
    echo "export RECOVERY_LAB_JWT_KEY=$DIR/etc/jwt_hs256.key"
  fi
}

# ---------------------------------------------------------------- down
# stop_pids PROGRAM:PIDFILE... -> SIGTERM all (after the /proc/PID/exe check), wait up to 15 s,
# SIGKILL what is left; pid files of dead or foreign processes are removed
stop_pids() {
  local item prog pf pid pids="" names="" i left=""
  for item in "$@"; do
    prog=${item%%:*}; pf=${item#*:}
    [ -e "$pf" ] || continue
    if pid=$(pid_of "$pf" "$prog"); then
      pids="$pids $pid"; names="$names $prog[$pid]"
    else
      rm -f "$pf"
    fi
  done
  [ -n "$pids" ] || return 0
  log "stopping$names"
  # shellcheck disable=SC2086
  kill -TERM $pids 2>/dev/null || true
  for i in $(seq 1 150); do
    left=""; for pid in $pids; do [ -d "/proc/$pid" ] && left="$left $pid"; done
    [ -z "$left" ] && break
    sleep 0.1
  done
  for pid in $left; do log "pid $pid still alive after 15 s: SIGKILL"; kill -KILL "$pid" 2>/dev/null || true; done
  for item in "$@"; do rm -f "${item#*:}"; done
}

stop_slurm_daemons() {
  local items=("slurmctld:$RUN/slurmctld.pid") pf
  for pf in "$RUN"/slurmd-*.pid; do [ -e "$pf" ] && items+=("slurmd:$pf"); done
  stop_pids "${items[@]}"
}

cancel_jobs() { # so that no slurmstepd outlives the lab
  local ids i
  alive "$RUN/slurmctld.pid" slurmctld || return 0
  Rt 5 scontrol ping >/dev/null 2>&1 || return 0
  ids=$(Rt 15 squeue -h -t PD,R,CG,S,CF,RQ,RH,RF,RS,SE,ST -o %i 2>/dev/null | tr '\n' ' ' || true)
  [ -n "${ids// /}" ] || return 0
  log "cancelling jobs: $ids"
  # shellcheck disable=SC2086
  Rt 15 scancel $ids 2>/dev/null || true
  for i in $(seq 1 100); do
    [ -z "$(Rt 5 squeue -h -t R,CG,S,ST -o %i 2>/dev/null)" ] && break
    sleep 0.1
  done
}

do_down() {
  [ -d "$RUN" ] || { log "nothing to stop ($RUN missing)"; return 0; }
  load_labenv || resolve_version host
  cancel_jobs
  stop_pids "slurmrestd:$RUN/slurmrestd.pid"
  stop_slurm_daemons
  stop_pids "slurmdbd:$RUN/slurmdbd.pid"     # after slurmctld, so it gets the last records
  stop_pids "munged:$RUN/munged.pid"         # only exists when we started munged
  umount_root
  log "stopped"
}

# ---------------------------------------------------------------- status
do_status() {
  local pf pid any=0 name prog
  load_labenv || resolve_version host
  echo "lab dir: $DIR"
  echo "SLURM_CONF=$CONF"
  if [ "$MODE" = root ]; then
    echo "slurm: $VERSION ($(cat "$ROOT/.recovery-lab-root" 2>/dev/null || echo 'root not built'), Debian $SUITE root $ROOT)"
  else
    # (not `sinfo -V`: without a slurm.conf it first spends a minute looking for a configless server)
    local pkg
    pkg=$(dpkg-query -W -f='${Version}' slurm-client 2>/dev/null | sed 's/-.*//') || true
    [ -n "$pkg" ] && pkg="slurm-wlm $pkg" || pkg="not installed"
    echo "slurm: $VERSION ($pkg, host packages)"
  fi
  echo "ports: slurmctld $CTLD_PORT, nodes $((NODE_PORT_BASE + 1))..$((NODE_PORT_BASE + NODES))$([ "$DBD" = 1 ] && echo ", slurmdbd $DBD_PORT")$([ "$RESTD" = 1 ] && echo ", slurmrestd $RESTD_PORT")"
  echo "RECOVERY_SLURM_BIN_DIR=$DIR/bin"
  echo "timings: $(timings_line)"
  for pf in "$RUN"/*.pid; do
    [ -e "$pf" ] || continue
    name=$(basename "$pf" .pid)
    prog=${name%%-*}
    if pid=$(pid_of "$pf" "$prog"); then
      echo "$name running pid $pid"; any=1
    else
      echo "$name not running (stale pid file)"
    fi
  done
  if [ "$MODE" = host ] && [ ! -e "$RUN/munged.pid" ] && munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    echo "munged running (not started by the lab)"
  fi
  if [ "$any" = 1 ] && Rt 5 sinfo >/dev/null 2>&1; then
    Rt 5 sinfo
    return 0
  fi
  echo "lab is down"
  return 3
}

# what decides how soon a requeued or released job runs, as slurm.conf says it (the running slurmctld's when it answers)
timings_line() {
  local shown cred sched ctld
  shown=$(Rt 5 scontrol show config 2>/dev/null) || shown=""
  if [ -n "$shown" ]; then
    cred=$(printf '%s\n' "$shown" | sed -n 's/^AuthInfo *= *//p' | tr ',' '\n' | sed -n 's/^cred_expire=//p')
    sched=$(printf '%s\n' "$shown" | sed -n 's/^SchedulerParameters *= *//p')
    ctld=$(printf '%s\n' "$shown" | sed -n 's/^SlurmctldParameters *= *//p')
  else
    cred=$(sed -n 's/^AuthInfo=//p' "$CONF" 2>/dev/null | tr ',' '\n' | sed -n 's/^cred_expire=//p')
    sched=$(sed -n 's/^SchedulerParameters=//p' "$CONF" 2>/dev/null)
    ctld=$(sed -n 's/^SlurmctldParameters=//p' "$CONF" 2>/dev/null)
  fi
  local delay
  delay=$(printf '%s\n' "$sched" | tr ',' '\n' | sed -n 's/^requeue_delay=//p')
  if has_requeue_delay; then delay="requeue_delay ${delay:-${cred:-120}} s"; else delay="no requeue_delay before 25.11"; fi
  echo "$TIMINGS (cred_expire ${cred:-120} s, $delay, SchedulerParameters=${sched:-(Slurm defaults: sched_interval=60,bf_interval=30)}$([ -n "$ctld" ] && echo ", SlurmctldParameters=$ctld"))"
}

do_build() {
  [ "$(id -u)" = 0 ] || die "must run as root (apt-get, debootstrap); try sudo -E"
  resolve_version "$WANT"
  if [ "$MODE" = host ]; then
    log "Slurm $VERSION runs from the host's packages: no root to build"
    return 0
  fi
  install_packages debootstrap
  build_root
  log "root of Slurm $VERSION: $ROOT ($(cat "$ROOT/.recovery-lab-root"))"
}

# One `up`/`down` at a time per lab dir (several test sessions share a lab): the lock is held by
# flock(1) itself (-o), so the daemons this script starts never inherit it.
if [ "$ACTION" = up ] || [ "$ACTION" = down ]; then
  if [ -z "${RECOVERY_LAB_LOCKED:-}" ] && command -v flock >/dev/null && mkdir -p "$DIR" 2>/dev/null; then
    RECOVERY_LAB_LOCKED=1 exec flock -o -w 600 "$DIR/.lab.lock" bash "$0" "$@"
  fi
fi

case $ACTION in
  up) do_up ;;
  down) do_down ;;
  status) do_status ;;
  build) do_build ;;
  *) echo "usage: $0 up|down|status|build" >&2; exit 2 ;;
esac
