#!/usr/bin/env bash
# A one-node SLURM cluster on this machine (Debian's slurm-wlm + munge), for checking the `slurm` Snakemake
# profile against real daemons. Needs root and `apt-get install slurm-wlm munge`. Idempotent: restarts the
# daemons with a fresh config. No systemd here, so the daemons are started by hand; without an accounting
# database (`accounting_storage/none`), `sacct` cannot answer, so the profile asks `squeue` for job status.
# slurmd runs at nice 10 (its jobs inherit it): a check on a busy machine leaves the other work its cores.
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "local_cluster.sh: needs root" >&2; exit 2; }
for b in slurmctld slurmd munged sinfo; do
  command -v "$b" >/dev/null || { echo "local_cluster.sh: $b not found (apt-get install slurm-wlm munge)" >&2; exit 2; }
done
host=$(hostname -s)
read -r cpus mem < <(slurmd -C | awk -F'[ =]' '/NodeName/ {for (i=1;i<=NF;i++) {if ($i=="CPUs") c=$(i+1); if ($i=="RealMemory") m=$(i+1)}; print c, m}')
pkill -x slurmctld 2>/dev/null || true
pkill -x slurmd 2>/dev/null || true
pkill -x munged 2>/dev/null || true
sleep 1
install -d -o munge -g munge -m 0755 /run/munge
install -d -o munge -g munge -m 0700 /etc/munge /var/lib/munge /var/log/munge
[ -s /etc/munge/munge.key ] || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key
su -s /bin/sh munge -c /usr/sbin/munged
install -d -m 0755 /run/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
cat > /etc/slurm/slurm.conf <<CONF
ClusterName=alphagym
SlurmctldHost=${host}
SlurmUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurm/slurmctld.pid
SlurmdPidFile=/run/slurm/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
NodeName=${host} CPUs=${cpus} RealMemory=${mem} State=UNKNOWN
PartitionName=cpu Nodes=${host} Default=YES MaxTime=INFINITE State=UP
CONF
slurmctld
nice -n 10 slurmd
for _ in $(seq 1 30); do
  if sinfo -h -o '%T' 2>/dev/null | grep -qx idle; then
    sinfo
    exit 0
  fi
  sleep 1
done
echo "local_cluster.sh: the node did not become idle; see /var/log/slurm/" >&2
sinfo >&2 || true
exit 1
