from percache_plugin.predict.parse import parse_questions
from percache_plugin.predict.templates import load_template


def test_parses_numbered_bulleted_and_led_in_questions() -> None:
    text = (
        "1. What was the purpose of the meeting?\n"
        "- The user could ask: \"Who attended the meeting?\"\n"
        "* when is the rehearsal\n"
        "I'm a music professional with a busy schedule. How about a short Q&A?\n"
        "What was the purpose of the meeting ?\n"
        "Sure!\n"
    )
    assert parse_questions(text, limit=10) == [
        "What was the purpose of the meeting?",
        "Who attended the meeting?",
        "when is the rehearsal?",
    ]
    assert parse_questions(text, limit=1) == ["What was the purpose of the meeting?"]


def test_template_override(tmp_path) -> None:
    (tmp_path / "abstract.txt").write_text("Summarize in French.")
    assert load_template("abstract", tmp_path) == "Summarize in French."
    assert "key topics" in load_template("abstract", None)
