<?php
// semtest.php: php sysvsem; output must match native.
$key = 0x6161;
$s = sem_get($key, 2, 0600, true);
var_dump($s !== false);
var_dump(sem_acquire($s));
var_dump(sem_acquire($s));
var_dump(sem_acquire($s, true)); // nowait: max_acquire 2 reached
var_dump(sem_release($s));
var_dump(sem_release($s));
var_dump(sem_remove($s));
