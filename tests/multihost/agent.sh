#!/bin/sh
# Stand-in for ssh used by Open MPI's rsh launcher (--mca plm_rsh_agent) to
# reach a "host" that is a network namespace on this machine:
#   agent.sh [ssh options] HOST COMMAND...
# runs COMMAND with `sh -c` inside network namespace HOST, in a new UTS
# namespace whose hostname is HOST.  RUSTOFI_MH_HOSTS ("ADDR=NAME ...") maps
# addresses used in the hostfile to namespace/host names.
while [ $# -gt 0 ]; do
    case "$1" in
        -[bcDEeFIiJLlmOopQRSWw]) shift 2 ;;
        -*) shift ;;
        *) break ;;
    esac
done
if [ $# -lt 2 ]; then
    echo "agent.sh: usage: agent.sh [ssh options] HOST COMMAND..." >&2
    exit 255
fi
host=$1
shift
name=$host
for pair in $RUSTOFI_MH_HOSTS; do
    if [ "${pair%%=*}" = "$host" ]; then
        name=${pair#*=}
    fi
done
exec ip netns exec "$name" unshare --uts sh -c "hostname '$name' && $*"
