"""The notebooks of notebooks/ run headless (nbclient) in a kernel of this Python, and the Python API
behaves in a Jupyter kernel as outside one: a function defined in a cell reaches spawned ranks, a
result draws itself as HTML, the progress bar draws, and the stop button stops every rank.

The kernel is this interpreter (`sys.executable`, the venv's), through a kernel spec of our own in
a temporary JUPYTER_PATH, whatever kernels the machine has installed."""

import json
import os
import sys
import time
from pathlib import Path

import psutil
import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")


ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
KERNEL = "playground-test"
CELL_TIMEOUT_S = 50


@pytest.fixture(scope="module")
def kernel_name(tmp_path_factory):
    spec_dir = tmp_path_factory.mktemp("jupyter") / "kernels" / KERNEL
    spec_dir.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec_dir / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": KERNEL, "language": "python"})
    )
    saved = os.environ.get("JUPYTER_PATH")
    os.environ["JUPYTER_PATH"] = str(spec_dir.parent.parent)
    yield KERNEL
    if saved is None:
        os.environ.pop("JUPYTER_PATH")
    else:
        os.environ["JUPYTER_PATH"] = saved


def execute(book, kernel_name: str, cwd: Path):
    """Run every cell; a cell that raises fails the test with its traceback (CellExecutionError)."""
    client = nbclient.NotebookClient(
        book, kernel_name=kernel_name, timeout=CELL_TIMEOUT_S, resources={"metadata": {"path": str(cwd)}}
    )
    client.execute()
    return book


def outputs(book, kind: str) -> list:
    return [
        o for cell in book.cells if cell.cell_type == "code" for o in cell.outputs if o.output_type == kind
    ]


def notebook(*sources: str):
    book = nbformat.v4.new_notebook()
    book.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    return book


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stored_without_outputs(path):
    book = nbformat.read(path, as_version=4)
    nbformat.validate(book)
    code = [c for c in book.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)


@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, kernel_name, tmp_path):
    book = execute(nbformat.read(path, as_version=4), kernel_name, tmp_path)
    assert not outputs(book, "error")
    results = [o for o in outputs(book, "execute_result") if "<Result " in o.data.get("text/plain", "")]
    assert results and all(" ok -&gt; " in o.data["text/html"] for o in results)
    assert (tmp_path / "runs" / "latest").is_dir()


@pytest.mark.timeout(60)
def test_function_defined_in_a_cell_runs_on_ranks(kernel_name, tmp_path):
    """The documented example, as a notebook user types it: the function exists only in the kernel."""
    book = execute(
        notebook(
            "import sys\nimport numpy as np\nimport playground as pg\nprint(sys.executable)",
            "def my_rank(comm, params):\n"
            "    x = np.full(params['n'], comm.rank, dtype=np.float64)\n"
            "    return {'sum': float(pg.allreduce(comm, x)[0])}",
            "r = pg.launch(my_rank, ranks=4, params={'n': 1000})\nr",
            "print([v['sum'] for v in r.returned], r.ok)",
        ),
        kernel_name,
        tmp_path,
    )
    streams = "".join(o.text for o in outputs(book, "stream") if o.name == "stdout")
    assert streams.splitlines()[0] == sys.executable
    assert "[6.0, 6.0, 6.0, 6.0] True" in streams
    shown = book.cells[2].outputs
    result = next(o for o in shown if o.output_type == "execute_result")
    assert "my_rank: what each rank returned" in result.data["text/html"]
    bars = [o for o in shown if o.output_type == "display_data" and "text/html" in o.data]
    assert bars, "the progress bar drew nothing"  # redrawn in place; it ends empty, as the terminal's


@pytest.mark.timeout(60)
def test_stop_button_stops_every_rank(kernel_name, tmp_path):
    """Interrupting the kernel while ranks run (what the stop button does: SIGINT to the kernel)
    raises KeyboardInterrupt in the cell, and leaves no rank process and no scratch directory."""
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name=kernel_name, cwd=str(tmp_path))
    try:
        code = (
            "import os, time\nimport playground as pg\n"
            "def hang(comm, params):\n"
            "    with open(f'{params[\"dir\"]}/rank-{comm.rank}.started', 'w') as f:\n"
            "        f.write(os.environ['PLAYGROUND_IPC_DIR'])\n"
            "    time.sleep(120)\n"
            f"pg.launch(hang, ranks=3, params={{'dir': {str(tmp_path)!r}}}, transport='shm')"
        )
        msg_id = kc.execute(code)
        started = [tmp_path / f"rank-{r}.started" for r in range(3)]
        deadline = time.monotonic() + 40
        while not all(p.exists() and p.read_text() for p in started):
            assert time.monotonic() < deadline, "the ranks did not start"
            time.sleep(0.1)
        kernel = psutil.Process(km.provisioner.process.pid)
        assert len(ranks_of(kernel)) == 3
        km.interrupt_kernel()
        reply = kc.get_shell_msg(timeout=30)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = kc.get_shell_msg(timeout=30)
        assert reply["content"]["status"] == "error"
        assert reply["content"]["ename"] == "KeyboardInterrupt"
        ipc_dir = started[0].read_text()
        assert not os.path.exists(ipc_dir)
        assert not os.path.exists(ipc_dir.replace(os.path.dirname(ipc_dir), "/dev/shm"))
        assert not ranks_of(kernel)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def ranks_of(kernel) -> list:
    """The kernel's live child processes but multiprocess's resource tracker (one per spawning
    process, for its lifetime): the ranks it spawned."""
    out = []
    for p in kernel.children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in " ".join(p.cmdline()):
                out.append(p)
        except psutil.Error:
            pass
    return out
