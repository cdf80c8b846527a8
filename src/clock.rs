pub struct TimerWheel;
