<?php
// A PHP program that times its own functions (hrtime, the monotonic
// clock): crunch() computes on the CPU, nap() sleeps in usleep, both
// called from work(). Run: php work.php SECONDS; prints one JSON line
// with each function's time and the whole run's, in ns.

function crunch(int $n): int
{
    $x = 0;
    for ($i = 0; $i < $n; $i++) {
        $x = ($x * 31 + $i) % 1000003;
    }
    return $x;
}

function nap(int $us): void
{
    usleep($us);
}

function work(float $seconds): array
{
    $t = ['crunch' => 0, 'nap' => 0];
    $start = hrtime(true);
    $sink = 0;
    while (hrtime(true) - $start < $seconds * 1e9) {
        $a = hrtime(true);
        $sink += crunch(300000);
        $b = hrtime(true);
        nap(2000);
        $c = hrtime(true);
        $t['crunch'] += $b - $a;
        $t['nap'] += $c - $b;
    }
    $t['total'] = hrtime(true) - $start;
    $t['sink'] = $sink % 7;
    return $t;
}

// Untimed: the capture finds the interpreter within a turn of its loop,
// as it finds a server that runs already (short sleeps: a sleep's stack
// is taken where it begins).
for ($i = 0; $i < 30; $i++) {
    usleep(10000);
}
echo json_encode(work((float)($argv[1] ?? 2))), "\n";
