"""See a run in the browser: ``grouprl dashboard`` (live, local server) and ``grouprl report``
(one self-contained HTML file). Both read a run folder's files and nothing else."""

from grouprl.observe.dashboard.page import render_page, report_data, write_report
from grouprl.observe.dashboard.rollout_index import RolloutIndex
from grouprl.observe.dashboard.run_folder import RunFolder, open_runs
from grouprl.observe.dashboard.server import DashboardServer

__all__ = ["DashboardServer", "RolloutIndex", "RunFolder", "open_runs", "render_page", "report_data", "write_report"]
