<?php
// msgtest.php: php sysvmsg; output must match native.
$q = msg_get_queue(0x6262, 0600);
var_dump(msg_send($q, 1, "hello", false));
var_dump(msg_send($q, 2, array(1, 2, 3)));
$st = msg_stat_queue($q);
var_dump($st["msg_qnum"], $st["msg_qbytes"], $st["msg_perm.mode"]);
var_dump(msg_receive($q, 2, $type, 64, $msg));
var_dump($type, $msg);
var_dump(msg_receive($q, 0, $type, 64, $msg, false));
var_dump($type, $msg);
var_dump(msg_receive($q, 0, $type, 64, $msg, true, MSG_IPC_NOWAIT, $err));
var_dump($err);
var_dump(msg_send($q, 3, "0123456789", false));
var_dump(msg_receive($q, 0, $type, 4, $msg, false, 0, $err));
var_dump($err);
var_dump(msg_receive($q, 0, $type, 4, $msg, false, MSG_NOERROR, $err));
var_dump($msg);
var_dump(msg_set_queue($q, array("msg_qbytes" => 32)));
$st = msg_stat_queue($q);
var_dump($st["msg_qbytes"]);
var_dump(msg_queue_exists(0x6262));
var_dump(msg_remove_queue($q));
var_dump(msg_queue_exists(0x6262));
