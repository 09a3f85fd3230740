"""``clepsydra k8s status | scale workers N | report-now``: Clepsydra on a cluster, through the
Kubernetes API and the user's kubeconfig (cluster.py; the ``kubernetes`` package is imported
only when one of these runs, so the rest of the CLI works without the k8s extra)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from clepsydra_client.cli.commands import Context, Output
from clepsydra_client.cli.render import format_delay_ms, render_table
from clepsydra_core.errors import ClepsydraError, ValidationError

if TYPE_CHECKING:
    from clepsydra_client.cli.k8s_cluster import Cluster

SCALABLE = {"workers": "clepsydra-scheduler-worker"}
"""What ``k8s scale`` may scale, by the name the user types."""


def _connect(args: argparse.Namespace, ctx: Context) -> Cluster:
    from clepsydra_client.cli.k8s_cluster import Cluster

    return Cluster.connect(kubeconfig=args.kubeconfig, context=args.context,
                           namespace=args.namespace, timeout_s=ctx.timeout_s)


def status(args: argparse.Namespace, ctx: Context) -> Output:
    from clepsydra_client.cli.k8s_cluster import ClusterError

    cluster = _connect(args, ctx)
    try:
        workloads = cluster.workloads()
        cron_jobs = cluster.cron_jobs()
        levels_error = None
        try:
            levels = cluster.level_backlog()
        except ClusterError as exc:
            # the workloads are still worth showing when the store does not answer
            levels, levels_error = [], exc.message
    finally:
        cluster.close()
    data = {
        "namespace": cluster.namespace,
        "workloads": [{"kind": w.kind, "name": w.name, "replicas": w.replicas,
                       "ready": w.ready} for w in workloads],
        "cronJobs": [{"name": c.name, "schedule": c.schedule, "suspended": c.suspended,
                      "lastSchedule": c.last_schedule, "active": c.active} for c in cron_jobs],
        "levels": [{"level": lv.level, "delayMs": lv.delay_ms, "backlog": lv.backlog}
                   for lv in levels],
        "levelsError": levels_error,
    }
    parts = [f"namespace {cluster.namespace}",
             render_table(["WORKLOAD", "KIND", "READY", "REPLICAS"],
                          [(w.name, w.kind, f"{w.ready}/{w.replicas}", w.replicas)
                           for w in workloads], right=(2, 3),
                          empty="(no Clepsydra workloads in this namespace)")]
    if cron_jobs:
        parts.append(render_table(
            ["CRONJOB", "SCHEDULE", "LAST RUN", "ACTIVE"],
            [(c.name, c.schedule + (" (suspended)" if c.suspended else ""),
              c.last_schedule or "never", c.active) for c in cron_jobs], right=(3,)))
    if levels_error:
        parts.append(f"levels: the store did not answer ({levels_error})")
    elif levels:
        parts.append(render_table(["LEVEL", "DELAY", "BACKLOG"],
                                  [(lv.level, format_delay_ms(lv.delay_ms), lv.backlog)
                                   for lv in levels], right=(0, 2)))
        parts.append(f"total backlog {sum(lv.backlog for lv in levels)}")
    return Output(data, "\n\n".join(parts))


def scale(args: argparse.Namespace, ctx: Context) -> Output:
    if args.replicas < 0:
        raise ValidationError(f"replicas must be 0 or more, not {args.replicas}")
    deployment = SCALABLE[args.what]
    cluster = _connect(args, ctx)
    try:
        replicas = cluster.scale(deployment, args.replicas)
        autoscaled = _autoscaler_runs(cluster)
    finally:
        cluster.close()
    text = f"{deployment} scaled to {replicas} in namespace {cluster.namespace}"
    if autoscaled:
        text += ("\nnote: clepsydra-scheduler-autoscaler runs in this namespace and sets the "
                 "workers from the backlog on its next look; scale it to 0 to keep this number")
    return Output({"deployment": deployment, "namespace": cluster.namespace,
                   "replicas": replicas, "autoscaled": autoscaled}, text)


def _autoscaler_runs(cluster: Cluster) -> bool:
    from clepsydra_client.cli.k8s_cluster import AUTOSCALER_DEPLOYMENT

    try:
        return any(w.name == AUTOSCALER_DEPLOYMENT and w.replicas > 0
                   for w in cluster.workloads())
    except ClepsydraError:
        return False  # may scale but not list: the note is a courtesy


def report_now(args: argparse.Namespace, ctx: Context) -> Output:
    from clepsydra_client.cli.k8s_cluster import REPORT_CRONJOB

    cluster = _connect(args, ctx)
    try:
        job = cluster.create_job_from_cron_job(REPORT_CRONJOB, args.name)
    finally:
        cluster.close()
    return Output({"job": job, "namespace": cluster.namespace, "cronJob": REPORT_CRONJOB},
                  f"job {job} started from cronjob/{REPORT_CRONJOB} in namespace "
                  f"{cluster.namespace}\nfollow it: kubectl -n {cluster.namespace} logs -f "
                  f"job/{job}")


def add_parser(sub: argparse._SubParsersAction,  # type: ignore[type-arg]
               parser_class: type[argparse.ArgumentParser]) -> None:
    """``clepsydra k8s ...`` in the CLI's parser."""
    k8s = sub.add_parser("k8s", help="Clepsydra on a Kubernetes cluster (your kubeconfig)")
    k8s.add_argument("--kubeconfig", help="kubeconfig file (default: KUBECONFIG, ~/.kube/config)")
    k8s.add_argument("--context", help="kubeconfig context (default: the current one)")
    k8s.add_argument("-n", "--namespace", help="namespace (default: the context's)")
    actions = k8s.add_subparsers(dest="action", metavar="ACTION", parser_class=parser_class,
                                 required=True)
    s = actions.add_parser("status", help="workloads, replicas, pods ready, backlog per level")
    s.set_defaults(fn=status)
    s = actions.add_parser("scale", help="set the number of scheduler workers")
    s.add_argument("what", choices=sorted(SCALABLE))
    s.add_argument("replicas", type=int)
    s.set_defaults(fn=scale)
    s = actions.add_parser("report-now", help="run the analytics report now (a Job from its "
                                              "CronJob)")
    s.add_argument("--name", help="the Job's name (default: <cronjob>-manual-<random>)")
    s.set_defaults(fn=report_now)
