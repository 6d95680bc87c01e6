import billing


def test_new_name_computes_the_total():
    assert billing.compute_total([10.0, 5.0], 0.2) == 18.0


def test_old_name_is_gone():
    assert not hasattr(billing, "calc")


def test_callers_still_work():
    assert billing.invoice_line([1.0, 2.0], 0.0) == "TOTAL 3.00"
