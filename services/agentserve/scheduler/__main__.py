"""`python -m agentserve.scheduler [--grpc-port N --http-port N --kvstore-address H:P ...]`."""

from agentserve.common.server import main
from agentserve.scheduler.config import SchedulerConfig
from agentserve.scheduler.service import SchedulerService

if __name__ == "__main__":
    main("scheduler", SchedulerConfig, SchedulerService)
