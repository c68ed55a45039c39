"""Exhaustive interleavings of read/add/write increments (lecture section 3.4, exercise 7)."""

from playground.concurrency.interleavings import (
    count_interleavings,
    describe,
    final_value_counts,
    interleavings,
    run_increments,
)


def test_one_increment_each_twenty_orders():
    assert count_interleavings([3, 3]) == 20
    assert len(list(interleavings([3, 3]))) == 20
    assert final_value_counts(2, 1) == {1: 18, 2: 2}


def test_two_increments_each_924_orders():
    assert count_interleavings([6, 6]) == 924
    assert final_value_counts(2, 2) == {2: 702, 3: 216, 4: 6}


def test_orders_are_distinct_and_keep_each_thread_in_order():
    orders = list(interleavings([2, 1, 1]))
    assert len(orders) == len(set(orders)) == count_interleavings([2, 1, 1]) == 12
    assert all(o.count(0) == 2 and o.count(1) == 1 for o in orders)


def test_lost_update_order_from_lecture():
    order = (0, 1, 0, 0, 1, 1)  # A read, B read, A add, A write, B add, B write
    assert run_increments(order, 2) == 1
    assert describe(order, 2).startswith("A read(0) -> B read(0) -> A add -> A write(1)")


def test_exercise7_minimum_two():
    # A read(0); B three increments' worth twice; A add, write(1); A read/add/write -> 2
    order = (0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0)
    assert run_increments(order, 2) == 2


def test_three_threads_one_increment():
    counts = final_value_counts(3, 1)
    assert sum(counts.values()) == count_interleavings([3, 3, 3]) == 1680
    assert counts[3] == 6  # only the 3! fully serial orders are right


def test_lecture_rows_match_the_lecture():
    from playground.concurrency.interleavings import lecture_rows

    one, two = lecture_rows()
    assert (one["case"], one["orders"], one["correct"], one["match"]) == (
        "2 threads x 1 increment(s)",
        20,
        2,
        True,
    )
    assert one["final_values"] == one["lecture"] == "x=1: 18, x=2: 2"
    assert (two["orders"], two["correct"], two["match"]) == (924, 6, True)
    assert two["final_values"] == "x=2: 702, x=3: 216, x=4: 6"
