#!/usr/bin/env python3
"""Accept three different positive integers whose sum is 30 and whose product is 910.

The answer comes on standard input; exit 0 accepts, and the last line of standard
error says why an answer is rejected.
"""

import math
import re
import sys

numbers = [int(n) for n in re.findall(r"-?\d+", sys.stdin.read())]
if len(numbers) != 3:
    sys.exit(f"It gives {len(numbers)} integers, not three.")
if min(numbers) <= 0:
    sys.exit("Not all of its integers are positive.")
if len(set(numbers)) != 3:
    sys.exit("Its integers are not all different.")
if sum(numbers) != 30:
    sys.exit(f"Its integers sum to {sum(numbers)}, not 30.")
if math.prod(numbers) != 910:
    sys.exit(f"The product of its integers is {math.prod(numbers)}, not 910.")
