//! `roce decode`: one line per frame of a pcap/pcapng file. (Being written.)
