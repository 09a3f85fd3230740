"""Who may call which route of the analytics API (clepsydra_web.auth): reading
reports and the export's status is an admin's and a viewer's, running a report an admin's."""

from __future__ import annotations

from clepsydra_core.auth import Action
from clepsydra_web.auth import Need, PermissionTable

ANALYTICS_ACCESS: PermissionTable = {
    "reports.list_reports": Need(Action.REPORTS),
    "reports.run_report": Need(Action.REPORT_RUN),
    "reports.get_report": Need(Action.REPORTS),
    "reports.report_html": Need(Action.REPORTS),
    "reports.report_chart": Need(Action.REPORTS),
    "reports.status": Need(Action.REPORTS),
}
