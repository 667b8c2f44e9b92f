"""What looks sensitive, and the context file's governance section (strict, file and field named)."""

from __future__ import annotations

import pytest

from dw_dagster.config import DwConfigError
from dw_dagster.context.governance import GovernanceConfig
from dw_dagster.context.models import load_context_file
from dw_dagster.governance.detectors import Detectors, luhn_valid, words


@pytest.mark.parametrize(
    ("name", "description", "category"),
    [
        ("CUSTOMER_EMAIL", None, "email"),
        ("customerEMail", None, "email"),
        ("CONTACT_PHONE", None, "phone"),
        ("SSN", None, "national_id"),
        ("NI_NUMBER", "The employee's National Insurance number", "national_id"),
        ("CARD_NUMBER", None, "card_number"),
        ("DOB", None, "date_of_birth"),
        ("BIRTH_DATE", None, "date_of_birth"),
        ("SHIPPING_ADDRESS", None, "address"),
        ("POSTCODE", None, "address"),
        ("CONTACT", "Where we write to: the customer's mailing address", "address"),
    ],
)
def test_names_and_descriptions_that_read_as_personal_data(name, description, category):
    match = Detectors().by_metadata(name, description)
    assert match is not None and match.category == category


@pytest.mark.parametrize(
    "name", ["CLASSNAME", "PANEL_ID", "ORDER_LINE_ID", "UNIT_PRICE", "EMAILS_SENT_FLAG_X", "STORE_ID", "SKU"]
)
def test_names_that_merely_contain_the_letters_raise_nothing(name):
    # EMAILS is a count of emails, not an address; the patterns match words, not fragments.
    assert Detectors().by_metadata(name, "Rows sent by the connector") is None


def test_words_reads_camel_case_and_separators():
    assert words("CustomerEmail") == words("CUSTOMER_EMAIL") == "customer email"
    assert words("SHIPPING_ADDRESS-LINE.1") == "shipping address line 1"


def test_luhn_separates_card_numbers_from_long_ids():
    assert luhn_valid("4111 1111 1111 1111")
    assert luhn_valid("5500-0000-0000-0004")
    assert not luhn_valid("4111 1111 1111 1112")
    assert not luhn_valid("411111")  # too short to be a card


def test_values_most_of_the_sample_matches():
    d = Detectors()
    assert d.by_values(["ana@shop.example", "ben.c+1@mail.example", None, "x@y.io"]).category == "email"
    assert d.by_values(["078-05-1120", "219-09-9999"]).category == "national_id"
    assert d.by_values(["JG 10 37 27 A", "AB123456D"]).category == "national_id"
    assert d.by_values(["+44 20 7946 0958", "(212) 555-0134"]).category == "phone"
    assert d.by_values(["4111111111111111", "5500 0000 0000 0004"]).category == "card_number"
    assert d.by_values(["221B Baker Street", "10 Downing St, London"]).category == "address"


def test_values_that_are_not_personal_raise_nothing():
    d = Detectors()
    # Sequential 16-digit ids: about one in ten passes Luhn, far below the share required.
    ids = [str(4000000000000000 + i) for i in range(50)]
    assert d.by_values(ids) is None
    assert d.by_values(["web", "app", "retail"]) is None
    assert d.by_values([1, 2, 3]) is None
    assert d.by_values([None, ""]) is None


def test_a_minority_of_matches_is_not_enough():
    sample = ["ana@shop.example"] + ["n/a"] * 9
    assert Detectors().by_values(sample) is None
    assert Detectors(GovernanceConfig(min_share=0.1)).by_values(sample).category == "email"


def test_configured_categories_and_patterns_add_to_the_defaults():
    config = GovernanceConfig(names={"health": [r"\bdiagnosis\b"]}, values={"national_id": [r"\d{9}"]})
    d = Detectors(config)
    assert d.by_metadata("PATIENT_DIAGNOSIS", None).category == "health"
    assert d.by_metadata("CUSTOMER_EMAIL", None).category == "email"  # defaults kept
    assert d.by_values(["123456782", "987654321"]).category == "national_id"
    only = Detectors(GovernanceConfig(use_defaults=False, names={"health": [r"\bdiagnosis\b"]}))
    assert only.by_metadata("CUSTOMER_EMAIL", None) is None


def test_ignore_globs_over_asset_and_column():
    config = GovernanceConfig(ignore=["raw_crm/*:EMAIL_HASH"])
    assert config.ignored("raw_crm/customers", "email_hash")
    assert not config.ignored("raw_crm/customers", "EMAIL")


def _context(tmp_path, governance: str):
    path = tmp_path / "context.yaml"
    path.write_text(
        "teams:\n  privacy:\n    name: Privacy\n    slack_channel: '#privacy'\n" + governance,
        encoding="utf-8",
    )
    return path


def test_the_context_file_names_the_governance_owners(tmp_path):
    context = load_context_file(_context(tmp_path, "governance:\n  owners: [privacy]\n  sample_rows: 50\n"))
    assert context.governance.owners == ["privacy"] and context.governance.sample_rows == 50


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        ("governance:\n  owners: [legal]\n", "governance.owners[0]: unknown team 'legal'"),
        (
            "governance:\n  names: {email: ['(unclosed']}\n",
            "email[0]: '(unclosed' is not a regular expression",
        ),
        ("governance:\n  names: {Email: ['x']}\n", "expected a category name in lower case"),
        ("governance:\n  sample_rows: 0\n", "governance.sample_rows"),
        ("governance:\n  owner: [privacy]\n", "governance.owner"),
    ],
)
def test_a_broken_governance_section_names_the_file_and_field(tmp_path, section, expected):
    path = _context(tmp_path, section)
    with pytest.raises(DwConfigError) as e:
        load_context_file(path)
    assert str(path) in str(e.value) and expected in str(e.value)
