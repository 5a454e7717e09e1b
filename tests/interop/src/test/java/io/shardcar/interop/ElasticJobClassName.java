package io.shardcar.interop;

/** The class ElasticJob writes into a job's root node for the members of this suite. */
final class ElasticJobClassName {
  static final String RECORDING_JOB = "io.shardcar.interop.member.ElasticJobMember$RecordingJob";

  private ElasticJobClassName() {}
}
