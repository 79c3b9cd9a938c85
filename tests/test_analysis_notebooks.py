"""The notebooks in analysis/notebooks/ run from top to bottom on samples/
(nbclient), so they cannot rot."""
import os

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.unit   # needs no root (conftest.py)

NOTEBOOKS = os.path.join(os.path.dirname(__file__), "..", "analysis",
                         "notebooks")


def execute(name):
    notebook = nbformat.read(os.path.join(NOTEBOOKS, name), as_version=4)
    client = NotebookClient(notebook, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": NOTEBOOKS}})
    client.execute()
    return notebook


def outputs_text(notebook):
    texts = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            assert output["output_type"] != "error", output
            data = output.get("data", {})
            texts.append(data.get("text/plain", "") + output.get("text", ""))
    return "\n".join(texts)


def images(notebook):
    return sum("image/png" in o.get("data", {})
               for c in notebook.cells for o in c.get("outputs", []))


def test_seek_cost_notebook():
    notebook = execute("seek-cost.ipynb")
    text = outputs_text(notebook)
    # Physical seek distance of samples/plan.csv in original order.
    assert "586166272" in text
    assert "'determined': False" in text
    # The recorded firefox-esr start-up: pages as in its trailer.
    assert "'pages': 103550" in text
    assert images(notebook) == 4


def test_startup_timing_notebook():
    notebook = execute("startup-timing.ipynb")
    text = outputs_text(notebook)
    # Cold runs 1.70, 1.75, 1.80 s: CI low 1.75 - 4.302653 * 0.05 / sqrt(3).
    assert "1.625793" in text
    assert "7.097536" in text  # ± as a percentage of the mean
    assert images(notebook) == 1


@pytest.mark.parametrize("name", ["seek-cost.ipynb", "startup-timing.ipynb"])
def test_notebooks_only_call_the_package(name):
    # House rule: logic lives in the package. No function or class
    # definitions in notebook cells.
    notebook = nbformat.read(os.path.join(NOTEBOOKS, name), as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert "def " not in cell.source and "class " not in cell.source
