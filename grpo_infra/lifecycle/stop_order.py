"""The stop order of a Slurm run: a listener on the head's stop port for as long as the run stops its Ray.

Run by the batch script as `python3 -c "$stop_order_program" ADDRESS PORT` (the sbatch embeds this file)
just before it has Slurm deliver INT to the job's steps. A node's step takes an INT as this run's order to
stop only while this port answers: an INT that slurmctld replays from an earlier run of the same job id
(a requeued job keeps its job and step ids) finds it closed and is ignored. Standard library only: it runs
in the job's image.
"""

import socket
import sys


def main() -> None:
    address, port = sys.argv[1], int(sys.argv[2])
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((address, port))
        listener.listen(128)
        while True:
            connection, _ = listener.accept()
            connection.close()


if __name__ == "__main__":
    main()
