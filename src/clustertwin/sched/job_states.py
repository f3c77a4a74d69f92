"""Job states and event kinds of the scheduler simulator."""

# job states; every submitted job ends a run in exactly one of queued, running, completed, killed and
# unschedulable (larger than the cluster, or than its team's quota can ever admit)
PENDING, QUEUED, RUNNING, COMPLETED, KILLED, UNSCHEDULABLE = 0, 1, 2, 3, 4, 5
STATE_NAMES = {PENDING: "pending", QUEUED: "queued", RUNNING: "running", COMPLETED: "completed", KILLED: "killed",
               UNSCHEDULABLE: "unschedulable"}

# event kinds, in processing order at equal times
END_EVENT, REPAIR_EVENT, FAIL_EVENT = 0, 1, 2
