"""ProbeKGC answering (paper 003, spec 4.1-4.2): prompts for a question, option letters from the answer
text, the K option log-probabilities from the first token's top log-probabilities, and the prediction
record ``score-mcq`` reads. Pure Python: called per row inside Spark tasks.

Record in: a row of the ``mcq.questions`` table or of its export: ``id``, ``text`` (or ``prompt``): the
direct user prompt :func:`kgbrink.mcq.render.prompt` rendered (text labels), ``options`` (or
``n_options``) for K.

Prompts ([code] ``prompt_hub.question_prompt``): ``system`` = :data:`kgbrink.mcq.render.SYSTEM_PROMPT`.
Direct (``probekgc-direct@1``): the rendered text as it is. CoT (``probekgc-cot@1``): the text's last
paragraph (the reply instruction) replaced by ``Reasoning step by step based on the provided context.
Finish the reasoning with the format "**The answer is <ID>.**", where <ID> is the option ID A/B/C/D.``
(the option ids of the K options joined by ``/``). RAG (``context``, 'Knowledge Enhancement Evaluation'):
before ``Complete the triple by answering the following question:``, ``The background knowledge of entity
"{e}" is:\\n{description}\\n\\n`` (when there is one), ``The triples related to entity "{e}" are:\\n...\\n\\n``
and ``The triples related to relation "{r}" are:\\n...\\n\\n``, one statement a line. ``single_user_message``
joins system and user text with a blank line, as [code] does for APIs.

Letters ([code] ``accuracy_cot.py``), from the K option letters only: direct: the stripped answer is ``A``
or ``A.``, else ``^([A-D])\\.\\s`` at the start of the answer; CoT: the matches of ``[Tt]he answer is
([A-D])\\.``, one match, or two equal ones (counted as one); anything else is void (None).

Log-probabilities (spec 4.2): the first token's ``top_logprobs`` (``[{"token", "logprob"}]`` as the API
gives them, or ``{token: logprob}``); tokens equal to a letter after stripping whitespace (``"C"``, ``" C"``)
are combined by log-sum-exp (at most 0); a letter absent from the list is None (``score-mcq`` reads -1e5).

Prediction record (``score-mcq``, docs/formats.md): ``id, letter, logprobs, model, run, strategy,
fixed_position`` (when given), ``reason`` (``void`` when neither a letter nor a log-probability was found;
``score-mcq`` would quarantine it as ``missing_prediction``) and ``truncated``. CoT runs carry no
log-probabilities ([code] ``--logprobs False``). :func:`accuracy` gives [code]'s ``accuracy_valid`` (correct
/ non-void) beside ``accuracy`` (void = wrong) and ``n_void``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping

from kgbrink.llm import templates
from kgbrink.mcq.render import SYSTEM_PROMPT

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
STRATEGIES = ("direct", "cot")
DEFAULT_TEMPLATES = {"direct": "probekgc-direct@1", "cot": "probekgc-cot@1"}
QUESTION_HEAD = "Complete the triple by answering the following question:"
REPLY_HEAD = "Reply with the correct option ID ("
VOID = "void"


# --- templates (built in; kgbrink.evaluation.templates gathers every paper's) ---

PROBEKGC_COT_INSTRUCTION = (
    'Reasoning step by step based on the provided context. Finish the reasoning with the format "**The answer is '
    '<ID>.**", where <ID> is the option ID {option_ids}.'
)
TEMPLATES: dict[str, templates.Template] = {
    t.ref: t
    for t in (
        templates.Template(
            "probekgc-direct",
            1,
            (("system", SYSTEM_PROMPT), ("user", "{prompt}")),
            ("prompt",),
            {"temperature": 0.0, "max_tokens": 16, "logprobs": True, "top_logprobs": 20},
            source="003 [code] prompt_hub.question_prompt (spec 4.1)",
        ),
        templates.Template(
            "probekgc-cot",
            1,
            (("system", SYSTEM_PROMPT), ("user", "{question_block}\n\n" + PROBEKGC_COT_INSTRUCTION)),
            ("question_block", "option_ids"),
            {"temperature": 0.0, "max_tokens": 1024},
            source="003 'Knowledge Enhancement Evaluation', [code] prompt_hub use_cot (spec 4.1)",
        ),
    )
}


def n_options(record: Mapping) -> int:
    """K of a question record (``n_options``, else the length of ``options``, else 4)."""
    if record.get("n_options") is not None:
        return int(record["n_options"])
    if record.get("options") is not None:
        return len(record["options"])
    return 4


def option_ids(k: int) -> str:
    """``A/B/C/D`` for K = 4."""
    return "/".join(LETTERS[:k])


def context_text(context: Mapping | None) -> str:
    """The RAG blocks of a context ``{"entity", "description"?, "entity_statements", "relation",
    "relation_statements"}`` ("" for None)."""
    if not context:
        return ""
    e, r = context["entity"], context["relation"]
    out = ""
    if context.get("description"):
        out += f'The background knowledge of entity "{e}" is:\n{context["description"]}\n\n'
    out += f'The triples related to entity "{e}" are:\n' + "\n".join(context.get("entity_statements") or ()) + "\n\n"
    out += f'The triples related to relation "{r}" are:\n' + "\n".join(context.get("relation_statements") or ())
    return out + "\n\n"


def _with_context(text: str, context: Mapping | None) -> str:
    extra = context_text(context)
    if not extra:
        return text
    at = text.find(QUESTION_HEAD)
    if at < 0:
        raise ValueError(f"question text has no {QUESTION_HEAD!r}: {text[:80]!r}")
    return text[:at] + extra + text[at:]


def question_block(text: str) -> str:
    """The direct prompt without its last paragraph (the reply instruction)."""
    head, sep, last = text.rpartition("\n\n")
    if not sep or not last.startswith(REPLY_HEAD):
        raise ValueError(f"question text does not end with a {REPLY_HEAD!r} paragraph: {text[-80:]!r}")
    return head


def prompt(
    record: Mapping,
    template: templates.Template | str | None = None,
    *,
    strategy: str = "direct",
    context: Mapping | None = None,
    single_user_message: bool = False,
) -> list[dict[str, str]]:
    """The chat messages of a question record (module docstring)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    text = _with_context(record["text"] if record.get("text") is not None else record["prompt"], context)
    template = templates.resolve(template or DEFAULT_TEMPLATES[strategy], TEMPLATES)
    values = {"prompt": text, "option_ids": option_ids(n_options(record))}
    if "question_block" in template.slots:
        values["question_block"] = question_block(text)
    messages = templates.render(template, values)
    if single_user_message:
        joined = "\n\n".join(m["content"] for m in messages)
        return [{"role": "user", "content": joined}]
    return messages


def direct_letter(content: str | None, n_options: int = 4) -> str | None:
    """The letter of a direct answer, or None (void)."""
    text = (content or "").strip()
    letters = LETTERS[:n_options]
    if len(text) in (1, 2) and text[0] in letters and text[1:] in ("", "."):
        return text[0]
    match = re.match(rf"([{letters}])\.\s", text)
    return match.group(1) if match else None


def cot_letter(content: str | None, n_options: int = 4) -> str | None:
    """The letter of a CoT answer (``The answer is X.``, once or twice the same), or None (void)."""
    matches = re.findall(rf"[Tt]he answer is ([{LETTERS[:n_options]}])\.", content or "")
    if len(matches) == 2 and matches[0] == matches[1]:
        matches = matches[:1]
    return matches[0] if len(matches) == 1 else None


def _alternatives(top_logprobs) -> list[tuple[str, float]]:
    if isinstance(top_logprobs, Mapping):
        items = top_logprobs.items()
    else:
        items = ((a.get("token"), a.get("logprob")) for a in top_logprobs or () if isinstance(a, Mapping))
    out = []
    for token, logprob in items:
        if isinstance(token, str) and isinstance(logprob, int | float) and not isinstance(logprob, bool):
            if math.isfinite(logprob):
                out.append((token, float(logprob)))
    return out


def option_logprobs(top_logprobs, n_options: int = 4) -> list[float | None]:
    """The K letters' log-probabilities from the first token's top log-probabilities (module docstring)."""
    found: dict[str, list[float]] = {}
    for token, logprob in _alternatives(top_logprobs):
        letter = token.strip()
        if len(letter) == 1 and letter in LETTERS[:n_options]:
            found.setdefault(letter, []).append(logprob)
    out: list[float | None] = []
    for letter in LETTERS[:n_options]:
        values = found.get(letter)
        if not values:
            out.append(None)
            continue
        top = max(values)
        out.append(min(0.0, top + math.log(sum(math.exp(v - top) for v in values))))
    return out


def prediction(
    item_id: str,
    content: str | None,
    *,
    strategy: str = "direct",
    top_logprobs=None,
    n_options: int = 4,
    model: str | None = None,
    run: str | None = None,
    fixed_position: str | None = None,
    finish_reason: str | None = None,
) -> dict:
    """The ``score-mcq`` prediction record of one answer (module docstring)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    letter = direct_letter(content, n_options) if strategy == "direct" else cot_letter(content, n_options)
    logprobs = option_logprobs(top_logprobs, n_options) if strategy == "direct" and top_logprobs else None
    if logprobs is not None and all(v is None for v in logprobs):
        logprobs = None
    out = {"id": item_id, "letter": letter, "logprobs": logprobs, "model": model, "run": run, "strategy": strategy}
    if fixed_position is not None:
        out["fixed_position"] = fixed_position
    out["reason"] = VOID if letter is None and logprobs is None else None
    out["truncated"] = finish_reason == "length"
    return out


def accuracy(letters: Iterable[str | None], golds: Iterable[str]) -> dict:
    """``n, n_void, n_correct, accuracy`` (void = wrong), ``accuracy_valid`` (correct / non-void, [code];
    None when every answer is void) of letters against gold letters."""
    pairs = list(zip(letters, golds, strict=True))
    n = len(pairs)
    n_void = sum(1 for letter, _ in pairs if letter is None)
    correct = sum(1 for letter, gold in pairs if letter is not None and letter == gold)
    return {
        "n": n,
        "n_void": n_void,
        "n_correct": correct,
        "accuracy": correct / n if n else None,
        "accuracy_valid": correct / (n - n_void) if n - n_void else None,
    }
