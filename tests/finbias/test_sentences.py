"""Sentence splitter on hand-written financial prose: abbreviations, decimals, initials."""
from __future__ import annotations

import pytest

from finlib.finbias.sentences import first_sentence, sentence_spans, split_sentences

# (text, expected sentences) -- written by hand, each a trap for a naive splitter.
CASES: list[tuple[str, list[str]]] = [
    ("We reiterate our BUY rating on Oracle Corp. (ORCL). Revenue rose 5%.",
     ["We reiterate our BUY rating on Oracle Corp. (ORCL).", "Revenue rose 5%."]),
    ("Apple Inc. reported record sales. Margins expanded.",
     ["Apple Inc. reported record sales.", "Margins expanded."]),
    ("Sales in the U.S. grew 3% in Q3. Europe was flat.",
     ["Sales in the U.S. grew 3% in Q3.", "Europe was flat."]),
    ("It sells mostly in the U.S. The company is based in Texas.",
     ["It sells mostly in the U.S.", "The company is based in Texas."]),
    ("Capex was $1.2 bn. in Q3 vs. $1.0 bn. a year ago. Margins fell.",
     ["Capex was $1.2 bn. in Q3 vs. $1.0 bn. a year ago.", "Margins fell."]),
    ("Revenue grew 12.5% to $4.37 billion. EPS was $1.05.",
     ["Revenue grew 12.5% to $4.37 billion.", "EPS was $1.05."]),
    ("EPS was $3.45. Next year should be better.",
     ["EPS was $3.45.", "Next year should be better."]),
    ("CEO John A. Smith resigned. He will stay as an adviser.",
     ["CEO John A. Smith resigned.", "He will stay as an adviser."]),
    ("J. P. Morgan Chase & Co. raised guidance. The stock rose.",
     ["J. P. Morgan Chase & Co. raised guidance.", "The stock rose."]),
    ("Growth drivers (e.g. cloud and AI) remain intact. We like the shares.",
     ["Growth drivers (e.g. cloud and AI) remain intact.", "We like the shares."]),
    ("Higher rates, i.e. above 5%, would hurt. Leverage is 2.1x.",
     ["Higher rates, i.e. above 5%, would hurt.", "Leverage is 2.1x."]),
    ("Net debt was approx. $3 bn. The balance sheet is sound.",
     ["Net debt was approx. $3 bn.", "The balance sheet is sound."]),
    ("Smith & Co. Ltd. reported strong results. Shares jumped.",
     ["Smith & Co. Ltd. reported strong results.", "Shares jumped."]),
    ("The E.U. fine was approx. $2 bn. The appeal continues.",
     ["The E.U. fine was approx. $2 bn.", "The appeal continues."]),
    ("Orders slowed in Jan. and Feb. before recovering. March was strong.",
     ["Orders slowed in Jan. and Feb. before recovering.", "March was strong."]),
    ("Dr. Reddy's Laboratories Ltd. filed an ANDA. Approval is expected.",
     ["Dr. Reddy's Laboratories Ltd. filed an ANDA.", "Approval is expected."]),
    ("The stock trades at 15.2x forward EPS vs. 18.0x for peers. It looks cheap.",
     ["The stock trades at 15.2x forward EPS vs. 18.0x for peers.", "It looks cheap."]),
    ("Gross margin rose 50 bps to 41.3%. Opex fell.",
     ["Gross margin rose 50 bps to 41.3%.", "Opex fell."]),
    ("Is the dividend safe? We think so. Coverage is 2.0x!",
     ["Is the dividend safe?", "We think so.", "Coverage is 2.0x!"]),
    ("Our target is $150. That implies 20% upside.",
     ["Our target is $150.", "That implies 20% upside."]),
    ("Acme Corp. vs. Beta Inc. is a close race. We prefer Acme.",
     ["Acme Corp. vs. Beta Inc. is a close race.", "We prefer Acme."]),
    ("FY2024 revenue was 3.1 bn. euros. The outlook is weak.",
     ["FY2024 revenue was 3.1 bn. euros.", "The outlook is weak."]),
    ("Q3 sales rose 4%. Q4 guidance was cut.",
     ["Q3 sales rose 4%.", "Q4 guidance was cut."]),
    ("The firm (Acme Inc.) disagreed. Litigation continues.",
     ["The firm (Acme Inc.) disagreed.", "Litigation continues."]),
    ("Mr. Lee and Ms. Park joined the board. Both are independent.",
     ["Mr. Lee and Ms. Park joined the board.", "Both are independent."]),
    ("Version 2.0 ships in 2025. Pricing is unchanged.",
     ["Version 2.0 ships in 2025.", "Pricing is unchanged."]),
    ("Rating: BUY\n\nOracle Corp. beat estimates. Cloud grew 28%.",
     ["Rating: BUY", "Oracle Corp. beat estimates.", "Cloud grew 28%."]),
    ("Shares fell 3.5%.  The selloff looks overdone.",
     ["Shares fell 3.5%.", "The selloff looks overdone."]),
    ("Costs rose, e.g. freight and labor. We cut our estimate.",
     ["Costs rose, e.g. freight and labor.", "We cut our estimate."]),
    ("The U.S. Department of Justice opened a probe. Shares fell 7%.",
     ["The U.S. Department of Justice opened a probe.", "Shares fell 7%."]),
    ("Brookfield Asset Management Inc. (BAM) is a buy. It yields 4.1%.",
     ["Brookfield Asset Management Inc. (BAM) is a buy.", "It yields 4.1%."]),
    ("Revenue was $2.7 bn. Over the past 90 days, EPS estimates fell.",
     ["Revenue was $2.7 bn.", "Over the past 90 days, EPS estimates fell."]),
    ("Chips, software, etc. Hardware fell. CEO John M. Smith left.",
     ["Chips, software, etc.", "Hardware fell.", "CEO John M. Smith left."]),
    ("Capex of $300 mn. Rising rates hurt; capex of $2 m. per site is small.",
     ["Capex of $300 mn.", "Rising rates hurt; capex of $2 m. per site is small."]),
    ("Capex was $204 mn. VSNV ended Q2 with 8,548 employees. U.S. sales rose.\n\nCapex of $9 mn. U.S. sales fell.",
     ["Capex was $204 mn.", "VSNV ended Q2 with 8,548 employees.", "U.S. sales rose.", "Capex of $9 mn.",
      "U.S. sales fell."]),
    ("Management guided to $2.50-$2.60. We are above the range.",
     ["Management guided to $2.50-$2.60.", "We are above the range."]),
]


@pytest.mark.parametrize("text,expected", CASES, ids=[c[0][:30] for c in CASES])
def test_split_tricky_sentences(text: str, expected: list[str]) -> None:
    assert split_sentences(text) == expected


def test_at_least_thirty_cases() -> None:
    assert len(CASES) >= 30


def test_spans_index_the_original_text() -> None:
    text = "  Oracle Corp. rose.\n\nIt fell 2.5%. Then it rose.  "
    spans = sentence_spans(text)
    assert [text[a:b] for a, b in spans] == ["Oracle Corp. rose.", "It fell 2.5%.", "Then it rose."]
    assert all(a < b for a, b in spans) and spans == sorted(spans)


def test_first_sentence_and_empty_text() -> None:
    assert first_sentence("Maintain Hold. Revenue fell.") == "Maintain Hold."
    assert first_sentence("   \n\n ") is None
    assert split_sentences("") == []


def test_extra_abbreviations_are_honoured() -> None:
    text = "The mgmt. Team was upbeat. Sales rose."
    assert split_sentences(text) == ["The mgmt.", "Team was upbeat.", "Sales rose."]
    assert split_sentences(text, extra_abbreviations=frozenset({"mgmt"})) == [
        "The mgmt. Team was upbeat.", "Sales rose."]


def test_a_paragraph_longer_than_the_block_limit_is_cut_at_whitespace():
    from finlib.finbias.sentences import MAX_BLOCK_CHARS, sentence_spans

    text = "The firm grew. " * (MAX_BLOCK_CHARS // 15 + 50)
    spans = sentence_spans(text)
    assert len(spans) == text.count(".")  # every sentence found once, none lost at the cut
    assert all(text[a:b] == "The firm grew." for a, b in spans)


def test_join_lines_is_the_only_place_single_line_breaks_are_joined():
    from finlib.finbias.data.validation import clean_text
    from finlib.finbias.sentences import join_lines

    report = "Maintain Buy.\nKey points:\n- Revenue rose 4%\n- Margins fell\n\nOutlook is stable."
    assert clean_text(report) == report                      # stage 00 keeps the report's lines
    assert join_lines(report) == "Maintain Buy. Key points: - Revenue rose 4% - Margins fell\n\nOutlook is stable."
    assert join_lines("a \n b\r\nc") == "a b c"


@pytest.mark.parametrize("text,first", [
    ("We maintain our BUY rating on Oracle (ORCL) with a $150 target\nKey points:\n- Revenue rose 4%\n- Margins fell",
     "We maintain our BUY rating on Oracle (ORCL) with a $150 target"),
    ("Rating: Buy | Target: $50\nRevenue rose 4% in the quarter.", "Rating: Buy | Target: $50"),
    ("We rate Acme Buy with a $50 target\n\u2022 Orders rose", "We rate Acme Buy with a $50 target"),
    ("We rate Acme Buy.\nFY24A\tFY25E\nRevenue\t10\t11", "We rate Acme Buy."),
    ("We rate Acme Buy with a $50 target\nEstimates      FY24A      FY25E", "We rate Acme Buy with a $50 target"),
    ("We rate Acme Buy\nKEY TAKEAWAYS\nrevenue rose", "We rate Acme Buy"),
    ("We maintain our Buy rating on\nOracle (ORCL) after the results.\nRevenue rose.",
     "We maintain our Buy rating on\nOracle (ORCL) after the results."),
    ("We maintain our Buy rating on Oracle (ORCL),\nraising our target to $160. Revenue rose.",
     "We maintain our Buy rating on Oracle (ORCL),\nraising our target to $160."),
    ("We maintain our Buy rating on Oracle (ORCL) as\nmargins recover. Revenue rose.",
     "We maintain our Buy rating on Oracle (ORCL) as\nmargins recover."),
])
def test_line_structure_ends_sentences(text, first):
    assert first_sentence(text) == first


def test_without_structure_punkt_reads_the_list_into_the_rating_sentence():
    from finlib.finbias.sentences import first_sentence_span

    text = "We maintain our BUY rating on Oracle (ORCL) with a $150 target\nKey points:\n- Revenue rose 4%"
    a, b = first_sentence_span(text, structure=False)
    assert text[a:b] == text


@pytest.mark.parametrize("lines", [
    # the longest line first; the second is as long as a wrapped line, but ends without a period and the
    # third line's first word would have fitted on it
    ["upgrading quinisridge water to overweight (from underweight) after cost cuts; target up to $57",
     "In Q3, grid investment increased 6.8% y/y, while pricing added approx. 2.6 points",
     "We find the capital allocation record brilliant relative to the sector",
     "We consider the product pipeline exceptional for the next two years"],
    # the second line is as long as the first and the third's first word would not have fitted on it either,
    # so each line looks broken at the width; but the run ends in a short line without a period
    ["We Move Helisnova Logistics (HLSN) From Sector Perform To Sector Outperform And Lower Our Target To $54",
     "U.S. sales accounted for approx. 69% of the total, and international sales increased 10.4% in the quarter",
     "The shares trade at 17.6x forward earnings vs. a peer median of 16.3x",
     "Net debt stood at $6.5 bn at quarter end, or 2.5x trailing EBITDA, vs. 2.0x a year earlier"],
])
def test_a_run_of_unpunctuated_one_sentence_lines_is_not_read_as_a_wrap(lines):
    """A broker's run of lines without periods, of about the same length: not wrapped prose, since the run
    of lines does not end a sentence, so each line is a sentence of its own (the rating line the authors'
    removal takes alone)."""
    text = "\n".join(lines) + "\n\nRevenue grew 6.3% y/y to $850 mn in Q4."
    assert split_sentences(text)[:4] == lines
    assert first_sentence(text) == lines[0]


def test_a_wrapped_run_is_prose_when_its_last_line_ends_the_sentence():
    """Four lines wrapped at one width, the last ending with a period: one sentence, however many full
    lines the run has before its end (the verdict waits on the run's last line)."""
    text = ("We raise our target after a quarter in which grid investment rose faster than at peers\n"
            "Quinisridge Water tracks, and pricing added more to margins than the sector reported\n"
            "while the regulator approved the rate case that management had filed in the late spring\n"
            "of the prior year.\nNext line.")
    assert split_sentences(text) == [text[:text.index("\nNext")], "Next line."]


def test_prose_wrapped_at_a_width_still_reads_as_one_sentence_across_capitalised_line_starts():
    """The same lengths wrapped from one sentence: every line but the last is broken where the next word
    did not fit, and the last ends with a period, so the lines join (a capital at a line start included)."""
    text = ("We raise our target after a quarter in which grid investment rose faster than at peers\n"
            "Quinisridge Water tracks, and pricing added more to margins than the sector reported\n"
            "Management expected.")
    assert split_sentences(text) == [text]
