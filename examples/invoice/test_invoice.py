import unittest

from invoice import apply_discount, subtotal, total

ITEMS = [("widget", 3, 2.50), ("gadget", 1, 10.00)]


class InvoiceTest(unittest.TestCase):
    def test_subtotal(self):
        self.assertEqual(subtotal(ITEMS), 17.50)

    def test_no_discount(self):
        self.assertEqual(total(ITEMS), 17.50)

    def test_discount(self):
        self.assertEqual(apply_discount(200, 25), 150)

    def test_total_with_discount_and_tax(self):
        self.assertEqual(total(ITEMS, discount_percent=20, tax_percent=10), 15.40)

    def test_bad_discount(self):
        with self.assertRaises(ValueError):
            apply_discount(10, 120)


if __name__ == "__main__":
    unittest.main()
