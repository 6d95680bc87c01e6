from csvsplit import split_line


def test_plain_fields_are_split():
    assert split_line("a,b,c") == ["a", "b", "c"]


def test_quoted_comma_stays_inside_its_field():
    assert split_line('x,"hello, world",z') == ["x", "hello, world", "z"]


def test_doubled_quote_is_one_quote():
    assert split_line('"say ""hi""",2') == ['say "hi"', "2"]


def test_empty_fields_survive():
    assert split_line(",,") == ["", "", ""]
