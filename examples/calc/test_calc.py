import unittest

import calc


class CalcTest(unittest.TestCase):
    def test_add(self):
        self.assertEqual(calc.add(2, 3), 5)

    def test_mul(self):
        self.assertEqual(calc.mul(4, 5), 20)

    def test_evaluate(self):
        self.assertEqual(calc.evaluate("6 * 7"), 42)

    def test_unknown_operator(self):
        with self.assertRaises(ValueError):
            calc.evaluate("1 / 2")


if __name__ == "__main__":
    unittest.main()
