"""Each benchmark's evaluation declared once for ``kgbrink predict`` (:class:`protocol.Evaluation`): its inputs,
contexts and templates, its prompts, how its answers are parsed and scored; the model-call step every role
shares, and what a run reads. A new benchmark is one module here and one line in :data:`EVALUATIONS`."""

from kgbrink.jobs.evaluations.brink import Brink
from kgbrink.jobs.evaluations.okgqa import OKGQA
from kgbrink.jobs.evaluations.probekgc import ProbeKGC
from kgbrink.jobs.evaluations.protocol import Evaluation
from kgbrink.jobs.evaluations.synthkgqa import SynthKGQA
from kgbrink.jobs.evaluations.synthkgqa_answer import SynthKGQAAnswer

EVALUATIONS: dict[str, Evaluation] = {e.name: e for e in (Brink(), OKGQA(), ProbeKGC(), SynthKGQA(), SynthKGQAAnswer())}
