"""A LiveKit worker's job pool, run as ``AgentServer`` runs it, with one job and no server.

LiveKit's own ``ProcPool`` (the worker's) with one process prewarmed, forkserver (LiveKit's
default on Linux) or the thread executor (``argv[1]``: ``process`` or ``thread``), runs one job
of LiveKit's own fake kind (a mock room, no livekit-server). Tracing comes only from the
environment (``OTEL_HANDOFF_AUTO_INSTRUMENT=true``). The app's prewarm installs
``loop_cost`` on the thread that will run the job's event loop; the job starts a session, then
writes what our code cost that loop (up to the session's start) and what provider it found, as
one JSON line to ``argv[2]``, and ends as a job ends (``ctx.shutdown()``).
"""

import asyncio
import dataclasses
import inspect
import json
import multiprocessing
import os
import sys
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/

import loop_cost
from livekit.agents import AgentSession, JobContext, JobExecutorType, JobProcess, ipc, job
from livekit.protocol import agent
from lk_agents import Billing
from opentelemetry import trace

from otel_handoff.cli.offline.livekit import ScriptedLLM

OUT = sys.argv[2] if len(sys.argv) > 2 else ""


def prewarm(proc: JobProcess) -> None:
    proc.userdata["cost"] = loop_cost.install()


async def entrypoint(ctx: JobContext) -> None:
    session = AgentSession(llm=ScriptedLLM())
    await session.start(agent=Billing())
    cost = ctx.proc.userdata["cost"]
    answer = {
        **cost.as_dict(),
        "provider": type(trace.get_tracer_provider()).__module__,
        "pid": os.getpid(),
    }
    with open(OUT, "a") as out:
        out.write(json.dumps(answer) + "\n")
    await session.aclose()
    ctx.shutdown("done")


def fake_job() -> job.RunningJobInfo:
    """LiveKit's fake job (a mock room; before 1.4 a room never connected, as the job never asks)."""
    fields = {f.name for f in dataclasses.fields(job.RunningJobInfo)}
    return job.RunningJobInfo(
        accept_arguments=job.JobAcceptArguments(name="", identity="", metadata=""),
        job=agent.Job(id=f"fake_job_{uuid.uuid4().hex}", type=agent.JobType.JT_ROOM),
        url="fake_url",
        token="fake_token",
        worker_id="fake_worker",
        **({"fake_job": True} if "fake_job" in fields else {}),
    )


def accepted(func: object, **options: object) -> dict[str, object]:
    """The options this release's ``func`` takes (the pool gained some from 1.4 on)."""
    parameters = inspect.signature(func).parameters
    return {name: value for name, value in options.items() if name in parameters}


async def main(executor: JobExecutorType) -> None:
    pool = ipc.proc_pool.ProcPool(
        **accepted(
            ipc.proc_pool.ProcPool,
            initialize_process_fnc=prewarm,
            job_entrypoint_fnc=entrypoint,
            session_end_fnc=None,
            simulation_end_fnc=None,
            num_idle_processes=1,
            initialize_timeout=60.0,
            close_timeout=30.0,
            session_end_timeout=10.0,
            inference_executor=None,
            job_executor_type=executor,
            mp_ctx=multiprocessing.get_context("forkserver"),
            memory_warn_mb=0,
            memory_limit_mb=0,
            http_proxy=None,
            loop=asyncio.get_running_loop(),
        )
    )
    ready = asyncio.Event()
    pool.on("process_ready", lambda _: ready.set())
    await pool.start()
    await ready.wait()  # the idle process is prewarmed before any job
    pool.set_target_idle_processes(0)  # none after it: the job takes the one warmed
    info = fake_job()
    await pool.launch_job(info)
    running = pool.get_by_job_id(info.job.id)
    assert running is not None
    await running.join()
    await pool.aclose()


if __name__ == "__main__":
    kind = JobExecutorType.THREAD if sys.argv[1] == "thread" else JobExecutorType.PROCESS
    asyncio.run(main(kind))
